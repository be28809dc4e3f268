/* sim._prefix_cache: the simulator's prefix KV cache in C, the same behaviour as sim/kvcache.py.
 *
 * Why: the simulator spends 60-70 % of its time in the cache's per-block loops (cProfile of the
 * lowshare shadow gate and of the fleet fit), and the shadow gate runs the simulator inside the
 * control plane. sim/kvcache.py stays the reference: tests/sim/test_sim_kvcache_reference.py
 * drives both with random job lifecycles and compares every answer and the contents after every
 * call, and the simulator's golden numbers are the same with either.
 *
 * The representation differs where that is free. A block is an entry in a pool (key, pin count,
 * links) found through an open-addressing index (linear probing, backward-shift deletion). Only
 * the evictable (pin count 0) entries are on the doubly linked LRU list, oldest at the head: an
 * entry leaves the list when it is pinned and rejoins it at the tail when its count drops back
 * to 0. That is the Python class's order exactly, because there a pinned block's position never
 * matters: every path back to count 0 moves the block to the back (release), and eviction steps
 * over pinned blocks (which the Python class parks for that reason).
 *
 * Keys are Python ints in [-2**63, 2**64): chained block hashes are unsigned 64-bit, synthetic
 * workloads use small or negative ints. They are kept as 128-bit integers, so -1 and 2**64 - 1
 * stay distinct as they are in Python. Anything else is a TypeError or an OverflowError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#ifndef SOURCE_DIGEST
#define SOURCE_DIGEST "unknown"
#endif
#define DIGEST_MARKER "cacheroute-source-digest:"

/* The source's SHA-256 behind a marker, so scripts/build_sim_native.py can read it from the file
 * without importing a possibly stale module. */
static const char digest_line[] = DIGEST_MARKER SOURCE_DIGEST;

typedef __int128 key_t128;

#define NIL (-1)
#define EMPTY (-1)

typedef struct {
    key_t128 key;
    int64_t count;    /* pin count; 0: on the LRU list */
    int32_t prev;     /* LRU links while count == 0; `next` links the free list when unused */
    int32_t next;
} Entry;

typedef struct {
    PyObject_HEAD
    long long capacity;
    long long reserved;  /* anonymous blocks promised to admitted requests */
    long long evictions;
    Entry *entries;      /* the pool */
    int32_t pool_size;   /* entries allocated */
    int32_t pool_used;   /* high-water mark of handed-out entries */
    int32_t free_head;   /* released entries, linked through `next` */
    int32_t *index;      /* slot -> entry, EMPTY when free */
    uint64_t mask;       /* index size - 1 (a power of two) */
    Py_ssize_t count;    /* cached blocks */
    Py_ssize_t unpinned; /* cached blocks with pin count 0 */
    int32_t head, tail;  /* LRU list of unpinned entries, oldest at head */
} CacheObject;

/* -- keys ------------------------------------------------------------------------------------ */

static int key_of(PyObject *item, key_t128 *out) {
    if (!PyLong_Check(item)) {
        PyErr_Format(PyExc_TypeError, "a block must be an int, got %.100s", Py_TYPE(item)->tp_name);
        return -1;
    }
    /* Workload ids are 63-bit and synthetic ones may be negative: PyLong_AsLongLongAndOverflow
       reads them digit by digit, where CPython 3.11's PyLong_AsUnsignedLongLong goes through
       _PyLong_AsByteArray for every int above 2**30 (a fifth of the cache's time in the suite's
       simulations, perf). Chained hashes at or above 2**63 take the unsigned call. */
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (overflow == 0) {
        if (value == -1 && PyErr_Occurred()) return -1;
        *out = (key_t128)value;
        return 0;
    }
    if (overflow > 0) {
        unsigned long long big = PyLong_AsUnsignedLongLong(item);
        if (big != (unsigned long long)-1 || !PyErr_Occurred()) {
            *out = (key_t128)big;
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
    }
    PyErr_SetString(PyExc_OverflowError, "a block must fit in [-2**63, 2**64)");
    return -1;
}

static inline uint64_t hash_key(key_t128 key) {
    uint64_t x = (uint64_t)key ^ ((uint64_t)((unsigned __int128)key >> 64) * 0x9E3779B97F4A7C15ULL);
    x ^= x >> 30;  /* splitmix64's finaliser: small and sequential ids spread over the index */
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x;
}

/* -- the index ------------------------------------------------------------------------------- */

/* The entry holding `key`, or NIL; `*slot_out` gets the slot it is in or the free slot where it
 * would go. */
static inline int32_t find(const CacheObject *self, key_t128 key, uint64_t *slot_out) {
    uint64_t slot = hash_key(key) & self->mask;
    for (;;) {
        int32_t at = self->index[slot];
        if (at == EMPTY) {
            if (slot_out) *slot_out = slot;
            return NIL;
        }
        if (self->entries[at].key == key) {
            if (slot_out) *slot_out = slot;
            return at;
        }
        slot = (slot + 1) & self->mask;
    }
}

static int grow_index(CacheObject *self) {
    uint64_t size = (self->mask + 1) * 2;
    int32_t *index = PyMem_Malloc(size * sizeof(int32_t));
    if (index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(index, 0xff, size * sizeof(int32_t));
    int32_t *old = self->index;
    uint64_t old_size = self->mask + 1;
    self->index = index;
    self->mask = size - 1;
    for (uint64_t i = 0; i < old_size; i++) {
        int32_t at = old[i];
        if (at == EMPTY) continue;
        uint64_t slot = hash_key(self->entries[at].key) & self->mask;
        while (index[slot] != EMPTY) slot = (slot + 1) & self->mask;
        index[slot] = at;
    }
    PyMem_Free(old);
    return 0;
}

/* Remove the index slot `slot` (backward-shift deletion keeps every probe run unbroken). */
static void index_remove(CacheObject *self, uint64_t slot) {
    int32_t *index = self->index;
    uint64_t mask = self->mask;
    uint64_t hole = slot;
    uint64_t next = (hole + 1) & mask;
    while (index[next] != EMPTY) {
        uint64_t home = hash_key(self->entries[index[next]].key) & mask;
        /* The entry at `next` may move into the hole unless its home lies in (hole, next]. */
        if (((next - home) & mask) >= ((next - hole) & mask)) {
            index[hole] = index[next];
            hole = next;
        }
        next = (next + 1) & mask;
    }
    index[hole] = EMPTY;
}

/* -- the LRU list ---------------------------------------------------------------------------- */

static inline void lru_unlink(CacheObject *self, int32_t at) {
    Entry *e = &self->entries[at];
    if (e->prev != NIL) self->entries[e->prev].next = e->next; else self->head = e->next;
    if (e->next != NIL) self->entries[e->next].prev = e->prev; else self->tail = e->prev;
}

static inline void lru_append(CacheObject *self, int32_t at) {
    Entry *e = &self->entries[at];
    e->prev = self->tail;
    e->next = NIL;
    if (self->tail != NIL) self->entries[self->tail].next = at; else self->head = at;
    self->tail = at;
}

/* -- entries --------------------------------------------------------------------------------- */

/* A new entry for `key` (not cached) with `count` pins, appended to the LRU list when 0. `slot`
 * is where find() said it would go. NIL with an exception set when memory runs out. */
static int32_t insert(CacheObject *self, key_t128 key, int64_t count, uint64_t slot) {
    if ((uint64_t)(self->count + 1) * 2 > self->mask + 1) {
        if (grow_index(self) < 0) return NIL;
        find(self, key, &slot);
    }
    int32_t at = self->free_head;
    if (at != NIL) {
        self->free_head = self->entries[at].next;
    } else {
        if (self->pool_used == self->pool_size) {
            if (self->pool_size >= INT32_MAX / 2) {
                PyErr_SetString(PyExc_MemoryError, "too many cached blocks");
                return NIL;
            }
            int32_t size = self->pool_size * 2;
            Entry *grown = PyMem_Realloc(self->entries, (size_t)size * sizeof(Entry));
            if (grown == NULL) {
                PyErr_NoMemory();
                return NIL;
            }
            self->entries = grown;
            self->pool_size = size;
        }
        at = self->pool_used++;
    }
    Entry *e = &self->entries[at];
    e->key = key;
    e->count = count;
    self->index[slot] = at;
    self->count++;
    if (count == 0) {
        lru_append(self, at);
        self->unpinned++;
    }
    return at;
}

/* Drop the `n` least recently released unpinned blocks; the caller checked that many exist. */
static void evict(CacheObject *self, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int32_t at = self->head;
        Entry *e = &self->entries[at];
        if (e->next != NIL) {  /* the next victim's entry, and the slot of the one after it */
            const Entry *next = &self->entries[e->next];
            __builtin_prefetch(next);
            if (next->next != NIL) __builtin_prefetch(&self->entries[next->next]);
        }
        lru_unlink(self, at);
        uint64_t slot;
        find(self, e->key, &slot);
        index_remove(self, slot);
        e->next = self->free_head;
        self->free_head = at;
        self->count--;
    }
    self->unpinned -= n;
    self->evictions += n;
}

/* Pin an entry once more. */
static inline void pin(CacheObject *self, int32_t at) {
    Entry *e = &self->entries[at];
    if (e->count == 0) {
        lru_unlink(self, at);
        self->unpinned--;
    }
    e->count++;
}

/* -- reading a call's blocks ------------------------------------------------------------------ */

/* A call's blocks converted to keys up front: a bad block is refused before anything changes,
 * and the loops can prefetch the index slots and entries of blocks a few places ahead. The
 * caches of a study do not fit in the CPU's caches, so without that every block costs two cache
 * misses one after the other (the index slot, then the entry). */
typedef struct {
    key_t128 *keys;
    Py_ssize_t n;
    key_t128 small[128];
} Keys;

static int keys_load(Keys *k, PyObject *blocks, Py_ssize_t limit) {
    PyObject *fast = PySequence_Fast(blocks, "blocks must be a sequence of ints");
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (limit >= 0 && n > limit) n = limit;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    k->n = n;
    k->keys = n <= (Py_ssize_t)(sizeof k->small / sizeof k->small[0])
                  ? k->small
                  : PyMem_Malloc((size_t)n * sizeof(key_t128));
    if (k->keys == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (key_of(items[i], &k->keys[i]) < 0) {
            if (k->keys != k->small) PyMem_Free(k->keys);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

static void keys_free(Keys *k) {
    if (k->keys != k->small) PyMem_Free(k->keys);
}

/* A Python int for the KeyError of a block that is not cached. */
static PyObject *key_object(key_t128 key) {
    if (key < 0) return PyLong_FromLongLong((long long)key);
    return PyLong_FromUnsignedLongLong((unsigned long long)key);
}

#define SLOT_AHEAD 12
#define ENTRY_AHEAD 6

/* Prefetch for the block `i` places into the walk (`step` +1 forwards, -1 backwards): the index
 * slot of the block SLOT_AHEAD further on, the entry of the block ENTRY_AHEAD further on (its
 * slot was fetched earlier). Only hints: the lookups themselves happen in order. */
static inline void prefetch(const CacheObject *self, const Keys *k, Py_ssize_t i, int step) {
    Py_ssize_t far = i + step * SLOT_AHEAD, near = i + step * ENTRY_AHEAD;
    if (far >= 0 && far < k->n) __builtin_prefetch(&self->index[hash_key(k->keys[far]) & self->mask]);
    if (near >= 0 && near < k->n) {
        int32_t at = self->index[hash_key(k->keys[near]) & self->mask];
        if (at != EMPTY) __builtin_prefetch(&self->entries[at]);
    }
}

/* -- the type -------------------------------------------------------------------------------- */

static int Cache_init(CacheObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"capacity_blocks", NULL};
    long long capacity;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L", kwlist, &capacity)) return -1;
    if (capacity <= 0) {
        PyErr_Format(PyExc_ValueError, "capacity_blocks must be > 0, got %lld", capacity);
        return -1;
    }
    if (self->entries != NULL) {
        PyErr_SetString(PyExc_TypeError, "PrefixCache is initialised once");
        return -1;
    }
    self->capacity = capacity;
    self->reserved = 0;
    self->evictions = 0;
    self->pool_size = 1024;
    self->entries = PyMem_Malloc((size_t)self->pool_size * sizeof(Entry));
    self->index = PyMem_Malloc(4096 * sizeof(int32_t));
    if (self->entries == NULL || self->index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memset(self->index, 0xff, 4096 * sizeof(int32_t));
    self->mask = 4095;
    self->pool_used = 0;
    self->free_head = NIL;
    self->count = 0;
    self->unpinned = 0;
    self->head = self->tail = NIL;
    return 0;
}

static void Cache_dealloc(CacheObject *self) {
    PyMem_Free(self->entries);
    PyMem_Free(self->index);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ready(CacheObject *self) {
    if (self->entries == NULL) {
        PyErr_SetString(PyExc_ValueError, "PrefixCache.__init__ was not called");
        return -1;
    }
    return 0;
}

static PyObject *Cache_match(CacheObject *self, PyObject *blocks) {
    if (ready(self) < 0) return NULL;
    /* Block by block, not through Keys: a hit is usually a short leading run of a long prompt,
     * and the blocks past the first miss need no converting. */
    PyObject *fast = PySequence_Fast(blocks, "blocks must be a sequence of ints");
    if (fast == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    Py_ssize_t hit = 0, unpinned = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        key_t128 key;
        if (key_of(items[i], &key) < 0) {
            Py_DECREF(fast);
            return NULL;
        }
        int32_t at = find(self, key, NULL);
        if (at == NIL) break;
        if (self->entries[at].count == 0) unpinned++;
        hit++;
    }
    Py_DECREF(fast);
    return Py_BuildValue("(nn)", hit, unpinned);
}

static PyObject *Cache_admit(CacheObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (ready(self) < 0) return NULL;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "admit(blocks, hit, unpinned, reserve)");
        return NULL;
    }
    Py_ssize_t hit = PyLong_AsSsize_t(args[1]);
    Py_ssize_t unpinned = PyLong_AsSsize_t(args[2]);
    long long reserve = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    long long free_ = self->capacity - (long long)self->count - self->reserved;
    if (free_ + (long long)self->unpinned - (long long)unpinned < reserve) Py_RETURN_FALSE;
    Keys k;
    if (keys_load(&k, args[0], hit < 0 ? 0 : hit) < 0) return NULL;
    for (Py_ssize_t i = 0; i < k.n; i++) {  /* every hit block must be cached: check first */
        if (find(self, k.keys[i], NULL) == NIL) {
            PyObject *missing = key_object(k.keys[i]);
            if (missing != NULL) {
                PyErr_SetObject(PyExc_KeyError, missing);
                Py_DECREF(missing);
            }
            keys_free(&k);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < k.n; i++) pin(self, find(self, k.keys[i], NULL));
    keys_free(&k);
    if (reserve > free_) {
        Py_ssize_t short_ = (Py_ssize_t)(reserve - free_);
        if (short_ > self->unpinned) {  /* only when hit/unpinned did not come from match() */
            PyErr_SetString(PyExc_ValueError, "admit: hit and unpinned must come from match()");
            return NULL;
        }
        evict(self, short_);
    }
    self->reserved += reserve;
    Py_RETURN_TRUE;
}

static PyObject *Cache_fill(CacheObject *self, PyObject *blocks) {
    if (ready(self) < 0) return NULL;
    Keys k;
    if (keys_load(&k, blocks, -1) < 0) return NULL;
    for (Py_ssize_t i = 0; i < k.n; i++) {
        prefetch(self, &k, i, 1);
        uint64_t slot;
        int32_t at = find(self, k.keys[i], &slot);
        if (at == NIL) {
            if (insert(self, k.keys[i], 1, slot) == NIL) {
                keys_free(&k);
                return NULL;
            }
        } else {
            pin(self, at);
        }
        self->reserved--;
    }
    keys_free(&k);
    Py_RETURN_NONE;
}

static PyObject *Cache_store(CacheObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (ready(self) < 0) return NULL;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "store(blocks, reserved)");
        return NULL;
    }
    long long reserved = PyLong_AsLongLong(args[1]);
    if (reserved == -1 && PyErr_Occurred()) return NULL;
    Keys k;
    if (keys_load(&k, args[0], -1) < 0) return NULL;
    long long used = 0;
    for (Py_ssize_t i = k.n - 1; i >= 0; i--) {
        prefetch(self, &k, i, -1);
        key_t128 key = k.keys[i];
        uint64_t slot;
        int32_t at = find(self, key, &slot);
        if (at != NIL) {
            if (self->entries[at].count == 0) {
                lru_unlink(self, at);
                lru_append(self, at);
            }
            continue;
        }
        if (used < reserved) {
            used++;
            self->reserved--;
        } else if ((long long)self->count + self->reserved >= self->capacity) {
            if (self->unpinned == 0) continue;
            evict(self, 1);
            find(self, key, &slot);  /* the eviction may have shifted the free slot */
        }
        if (insert(self, key, 0, slot) == NIL) {
            keys_free(&k);
            return NULL;
        }
    }
    keys_free(&k);
    return PyLong_FromLongLong(used);
}

static PyObject *Cache_warm(CacheObject *self, PyObject *recent_first) {
    if (ready(self) < 0) return NULL;
    if (self->count || self->reserved) {
        PyErr_SetString(PyExc_ValueError, "warm() needs an empty cache");
        return NULL;
    }
    Keys k;
    if (keys_load(&k, recent_first, (Py_ssize_t)self->capacity) < 0) return NULL;
    for (Py_ssize_t i = k.n - 1; i >= 0; i--) {  /* oldest first; a repeat keeps its first place */
        uint64_t slot;
        if (find(self, k.keys[i], &slot) != NIL) continue;
        if (insert(self, k.keys[i], 0, slot) == NIL) {
            keys_free(&k);
            return NULL;
        }
    }
    keys_free(&k);
    Py_RETURN_NONE;
}

static PyObject *Cache_release(CacheObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (ready(self) < 0) return NULL;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "release(blocks, reserved)");
        return NULL;
    }
    long long reserved = PyLong_AsLongLong(args[1]);
    if (reserved == -1 && PyErr_Occurred()) return NULL;
    Keys k;
    if (keys_load(&k, args[0], -1) < 0) return NULL;
    for (Py_ssize_t i = k.n - 1; i >= 0; i--) {
        prefetch(self, &k, i, -1);
        int32_t at = find(self, k.keys[i], NULL);
        if (at == NIL || self->entries[at].count == 0) {
            PyObject *block = key_object(k.keys[i]);
            if (block != NULL) {
                if (at == NIL) PyErr_SetObject(PyExc_KeyError, block);
                else PyErr_Format(PyExc_ValueError, "release of block %R, which is not pinned", block);
                Py_DECREF(block);
            }
            keys_free(&k);
            return NULL;
        }
        Entry *e = &self->entries[at];
        if (--e->count == 0) {
            lru_append(self, at);
            self->unpinned++;
        }
    }
    keys_free(&k);
    self->reserved -= reserved;
    Py_RETURN_NONE;
}

static int Cache_contains(CacheObject *self, PyObject *block) {
    if (ready(self) < 0) return -1;
    key_t128 key;
    if (!PyLong_Check(block)) return 0;  /* like a dict of ints: other objects are not in it */
    if (key_of(block, &key) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        return 0;
    }
    return find(self, key, NULL) != NIL;
}

static Py_ssize_t Cache_len(CacheObject *self) {
    return self->count;
}

static PyObject *Cache_get_used(CacheObject *self, void *closure) {
    (void)closure;
    return PyLong_FromLongLong((long long)self->count + self->reserved);
}

static PyObject *Cache_get_pinned(CacheObject *self, void *closure) {
    (void)closure;
    return PyLong_FromSsize_t(self->count - self->unpinned);
}

static PyMethodDef Cache_methods[] = {
    {"match", (PyCFunction)Cache_match, METH_O,
     "(length of the leading run of cached blocks, how many of those are evictable now)."},
    {"admit", (PyCFunction)(void (*)(void))Cache_admit, METH_FASTCALL,
     "Pin blocks[:hit] and reserve `reserve` more blocks, evicting LRU blocks as needed."},
    {"fill", (PyCFunction)Cache_fill, METH_O,
     "Turn reserved space into cached, pinned blocks (a prefill chunk was scheduled)."},
    {"store", (PyCFunction)(void (*)(void))Cache_store, METH_FASTCALL,
     "Cache a finished request's generated blocks as evictable; return reservations used."},
    {"warm", (PyCFunction)Cache_warm, METH_O,
     "Pre-fill an empty cache with evictable blocks, recent_first[0] the most recent."},
    {"release", (PyCFunction)(void (*)(void))Cache_release, METH_FASTCALL,
     "Unpin a finished request's cached blocks and return its reserved blocks."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Cache_members[] = {
    {"capacity", T_LONGLONG, offsetof(CacheObject, capacity), READONLY, "blocks in all"},
    {"reserved", T_LONGLONG, offsetof(CacheObject, reserved), 0, "blocks promised"},
    {"evictions", T_LONGLONG, offsetof(CacheObject, evictions), 0, "blocks evicted so far"},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Cache_getset[] = {
    {"used", (getter)Cache_get_used, NULL, "Blocks cached (pinned or evictable) plus reserved.", NULL},
    {"pinned", (getter)Cache_get_pinned, NULL, "Cached blocks with a pin count above 0.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Cache_as_sequence = {
    .sq_length = (lenfunc)Cache_len,
    .sq_contains = (objobjproc)Cache_contains,
};

static PyTypeObject CacheType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sim._prefix_cache.PrefixCache",
    .tp_doc = "Block cache with pinning, LRU eviction of unpinned blocks and reservations "
              "(sim.kvcache.PrefixCache in C).",
    .tp_basicsize = sizeof(CacheObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Cache_init,
    .tp_dealloc = (destructor)Cache_dealloc,
    .tp_methods = Cache_methods,
    .tp_members = Cache_members,
    .tp_getset = Cache_getset,
    .tp_as_sequence = &Cache_as_sequence,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sim._prefix_cache",
    .m_doc = "The simulator's prefix KV cache in C (native/simcache/prefix_cache.c).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__prefix_cache(void) {
    if (PyType_Ready(&CacheType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&CacheType);
    if (PyModule_AddObject(m, "PrefixCache", (PyObject *)&CacheType) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_DIGEST", digest_line + strlen(DIGEST_MARKER)) < 0) {
        Py_DECREF(&CacheType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
