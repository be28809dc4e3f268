"""What an OpenAI request means to the router, read alike by the HTTP front and the Endpoint
Picker: the routing-key rules, the prompt head per endpoint, OpenAI-style errors."""
