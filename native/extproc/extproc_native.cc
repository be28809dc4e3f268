// The Endpoint Picker's native ext_proc transport (docs/components/extproc.md, "Native transport").
//
// A gRPC C++ server for envoy.service.ext_proc.v3.ExternalProcessor/Process that carries the
// streams and nothing else: every message a stream receives goes, still serialized, to the router
// process over one Unix socket, and every answer the router writes back is sent on the stream as
// it is. The decision, the holds, passive health and every answer's bytes stay in Python
// (dataplane/extproc/stream.py, the same code the Python picker runs), so there is one policy.
//
// The server is a generic (byte buffer) service: it never parses ext_proc messages, so it needs
// no generated code and no .proto files, only the distribution's gRPC C++ library.
//
// Frames, both ways: u32 length of what follows (little endian) | u8 kind | u64 stream | payload.
// Out (to the router): HELLO (the bound port), OPEN (peer "\n" authorization), MESSAGE (a
// ProcessingRequest), HALF_CLOSE (the gateway sent its last message), GONE (the stream ended).
// In (from the router): MESSAGE (a ProcessingResponse), END (finish OK), ABORT (u8 gRPC code and
// a text). Everything queued while the socket was busy goes out in one write: a batch. A stream's
// OPEN goes with its first message; GONE only when the router did not end the stream itself.
//
//   extproc_native --listen HOST:PORT --socket PATH [--max-message BYTES] [--grace SECONDS]

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/byte_buffer.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

constexpr char kProcess[] = "/envoy.service.ext_proc.v3.ExternalProcessor/Process";
enum Kind : uint8_t {
  kHello = 1,
  kOpen = 2,
  kMessage = 3,
  kHalfClose = 4,
  kGone = 5,
  kEnd = 6,
  kAbort = 7,
};
constexpr size_t kHeader = 4 + 1 + 8;

void Fail(const char* what) {
  std::fprintf(stderr, "extproc_native: %s: %s\n", what, std::strerror(errno));
  std::fflush(stderr);
  std::_Exit(2);
}

// The socket to the router. Frames come from any thread; the thread that finds the socket idle
// writes everything queued meanwhile, in one write, until nothing is left: a batch, with no
// thread hop when the socket is free.
class Link {
 public:
  explicit Link(int fd) : fd_(fd) {}

  static void Frame(std::string* out, uint8_t kind, uint64_t stream, const std::string& payload) {
    size_t at = out->size();
    out->resize(at + kHeader);
    uint32_t length = static_cast<uint32_t>(1 + 8 + payload.size());
    std::memcpy(&(*out)[at], &length, 4);
    (*out)[at + 4] = static_cast<char>(kind);
    std::memcpy(&(*out)[at + 5], &stream, 8);
    out->append(payload);
  }

  void Send(uint8_t kind, uint64_t stream, const std::string& payload) {
    std::string frame;
    Frame(&frame, kind, stream, payload);
    SendFrames(std::move(frame));
  }

  void SendFrames(std::string frames) {
    std::unique_lock<std::mutex> lock(mu_);
    queued_ += frames;
    if (writing_) return;  // the thread writing now takes these too
    writing_ = true;
    std::string batch;
    while (!queued_.empty()) {
      batch.swap(queued_);
      lock.unlock();
      WriteAll(batch);
      batch.clear();
      lock.lock();
    }
    writing_ = false;
  }

  int fd() const { return fd_; }

 private:
  void WriteAll(const std::string& batch) {
    size_t done = 0;
    while (done < batch.size()) {
      ssize_t n = ::write(fd_, batch.data() + done, batch.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) Fail("writing to the router's socket");
      done += static_cast<size_t>(n);
    }
  }

  int fd_;
  std::mutex mu_;
  bool writing_ = false;
  std::string queued_;
};

class Streams;

// One ext_proc stream: reads go to the router, the router's answers are written in order.
class Stream : public grpc::ServerGenericBidiReactor {
 public:
  Stream(Streams* streams, Link* link, uint64_t id) : streams_(streams), link_(link), id_(id) {}

  void Begin(grpc::GenericCallbackServerContext* ctx) {
    if (ctx->method() != kProcess) {
      Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, ctx->method() + " is not served"));
      return;
    }
    std::string authorization;
    auto found = ctx->client_metadata().find("authorization");
    if (found != ctx->client_metadata().end()) {
      authorization.assign(found->second.data(), found->second.size());
    }
    opened_ = true;
    open_ = ctx->peer() + "\n" + authorization;  // sent with the first message (one frame less
    StartRead(&in_);                              // to wake the router for)
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Post(kHalfClose, std::string());
      return;
    }
    std::vector<grpc::Slice> slices;
    std::string payload;
    if (in_.Dump(&slices).ok()) {
      payload.reserve(in_.Length());
      for (const auto& s : slices) {
        payload.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
    }
    in_.Clear();
    Post(kMessage, payload);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;  // answered already (an immediate response): read no more
    }
    StartRead(&in_);
  }

  // One frame for the router, after the stream's OPEN if that has not gone yet.
  void Post(uint8_t kind, const std::string& payload) {
    std::string frames;
    if (!open_sent_) {
      open_sent_ = true;
      Link::Frame(&frames, kOpen, id_, open_);
    }
    Link::Frame(&frames, kind, id_, payload);
    link_->SendFrames(std::move(frames));
  }

  // From the router (the reader thread).
  void Deliver(uint8_t kind, const char* data, size_t size) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finishing_) return;
      if (kind == kMessage) {
        grpc::Slice slice(data, size);
        out_.emplace_back(&slice, 1);
      } else if (kind == kEnd) {
        ended_ = true;
        finishing_ = true;
        status_ = grpc::Status::OK;
      } else if (kind == kAbort) {
        int code = size > 0 ? static_cast<int>(static_cast<uint8_t>(data[0]))
                           : static_cast<int>(grpc::StatusCode::INTERNAL);
        std::string text = size > 1 ? std::string(data + 1, size - 1) : std::string();
        ended_ = true;
        finishing_ = true;
        status_ = grpc::Status(static_cast<grpc::StatusCode>(code), text);
      }
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok) {  // the stream is broken: what is left cannot be sent
        out_.clear();
        if (!finishing_) {
          finishing_ = true;
          status_ = grpc::Status(grpc::StatusCode::CANCELLED, "stream broken");
        }
      }
    }
    Pump();
  }

  void OnCancel() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      out_.clear();
      if (!finishing_) {
        finishing_ = true;
        status_ = grpc::Status::CANCELLED;
      }
    }
    Pump();
  }

  void OnDone() override;

 private:
  // Start the next write, or the finish once every answer is out (never two at once).
  void Pump() {
    enum { kNothing, kWrite, kFinish } action = kNothing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (writing_ || finished_) return;
      if (!out_.empty()) {
        current_ = std::move(out_.front());
        out_.pop_front();
        writing_ = true;
        action = kWrite;
      } else if (finishing_) {
        finished_ = true;
        action = kFinish;
      }
    }
    if (action == kWrite) StartWrite(&current_);
    if (action == kFinish) Finish(status_);
  }

  Streams* streams_;
  Link* link_;
  uint64_t id_;
  bool opened_ = false;     // a Process stream (another method is refused at once)
  bool open_sent_ = false;  // OPEN went to the router (reads run on one thread at a time)
  bool ended_ = false;      // the router ended the stream: it needs no GONE
  std::string open_;
  grpc::ByteBuffer in_;
  grpc::ByteBuffer current_;
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> out_;
  bool writing_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  grpc::Status status_;

  friend class Streams;
};

// Every open stream by id; a stream stays alive while the reader thread delivers to it.
class Streams : public grpc::CallbackGenericService {
 public:
  explicit Streams(Link* link) : link_(link) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    uint64_t id = next_.fetch_add(1);
    auto stream = std::make_shared<Stream>(this, link_, id);
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_[id] = stream;
    }
    stream->Begin(ctx);
    return stream.get();
  }

  void Deliver(uint8_t kind, uint64_t id, const char* data, size_t size) {
    std::shared_ptr<Stream> stream;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = open_.find(id);
      if (found == open_.end()) return;  // ended already: the answer has nowhere to go
      stream = found->second;
    }
    stream->Deliver(kind, data, size);
  }

  void Done(Stream* stream) {
    bool ended;
    {
      std::lock_guard<std::mutex> lock(stream->mu_);
      ended = stream->ended_;
    }
    if (stream->open_sent_ && !ended) link_->Send(kGone, stream->id_, std::string());
    std::shared_ptr<Stream> last;
    std::lock_guard<std::mutex> lock(mu_);
    auto found = open_.find(stream->id_);
    if (found != open_.end()) {
      last = std::move(found->second);  // freed after the lock, unless the reader holds it
      open_.erase(found);
    }
  }

 private:
  Link* link_;
  std::atomic<uint64_t> next_{1};
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Stream>> open_;
};

void Stream::OnDone() { streams_->Done(this); }

// The reader thread: frames from the router, dispatched to their streams; the router gone is
// the end of this process (there is nothing left to decide with).
void ReadLoop(Link* link, Streams* streams, size_t max_frame) {
  std::vector<char> buffer(1 << 16);
  size_t have = 0;
  for (;;) {
    if (have == buffer.size()) buffer.resize(buffer.size() * 2);
    ssize_t n = ::read(link->fd(), buffer.data() + have, buffer.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      std::fprintf(stderr, "extproc_native: the router closed the socket; exiting\n");
      std::_Exit(0);
    }
    if (n < 0) Fail("reading from the router's socket");
    have += static_cast<size_t>(n);
    size_t at = 0;
    while (have - at >= 4) {
      uint32_t length;
      std::memcpy(&length, buffer.data() + at, 4);
      if (length < 9 || length > max_frame) {
        std::fprintf(stderr, "extproc_native: bad frame length %u from the router\n", length);
        std::_Exit(2);
      }
      if (have - at < 4 + length) {
        if (4 + length > buffer.size()) buffer.resize(4 + length);
        break;
      }
      const char* frame = buffer.data() + at + 4;
      uint64_t id;
      std::memcpy(&id, frame + 1, 8);
      streams->Deliver(static_cast<uint8_t>(frame[0]), id, frame + 9, length - 9);
      at += 4 + length;
    }
    std::memmove(buffer.data(), buffer.data() + at, have - at);
    have -= at;
  }
}

int Connect(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Fail("socket");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof(address.sun_path)) {
    std::fprintf(stderr, "extproc_native: socket path too long: %s\n", path.c_str());
    std::_Exit(2);
  }
  std::memcpy(address.sun_path, path.c_str(), path.size());
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    Fail("connecting to the router's socket");
  }
  return fd;
}

int Usage() {
  std::fprintf(stderr,
               "usage: extproc_native --listen HOST:PORT --socket PATH "
               "[--max-message BYTES] [--grace SECONDS]\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen, socket_path;
  long long max_message = 17LL * 1024 * 1024;
  double grace = 5.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--listen") {
      listen = argv[i + 1];
    } else if (flag == "--socket") {
      socket_path = argv[i + 1];
    } else if (flag == "--max-message") {
      max_message = std::atoll(argv[i + 1]);
    } else if (flag == "--grace") {
      grace = std::atof(argv[i + 1]);
    } else {
      return Usage();
    }
  }
  if (argc % 2 != 1 || listen.empty() || socket_path.empty() || max_message <= 0) return Usage();

  sigset_t stop;  // SIGTERM and SIGINT are taken by one thread, the graceful stop below
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Link link(Connect(socket_path));
  Streams streams(&link);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  builder.SetMaxSendMessageSize(static_cast<int>(max_message));
  builder.RegisterCallbackGenericService(&streams);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    std::fprintf(stderr, "extproc_native: cannot listen on %s\n", listen.c_str());
    return 3;
  }
  std::thread reader([&] { ReadLoop(&link, &streams, static_cast<size_t>(max_message) + 64); });
  reader.detach();
  link.Send(kHello, 0, std::to_string(port));

  int signo = 0;
  sigwait(&stop, &signo);
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::milliseconds(static_cast<long long>(grace * 1000));
  server->Shutdown(deadline);  // streams under way get the grace period, then are cancelled
  std::fflush(stderr);
  std::_Exit(0);
}
