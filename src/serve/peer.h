// Whether the client of a request is still there, for a request whose reply is sent only at the
// end (non-streaming): cpp-httplib 0.11 (Debian 12's) gives a handler no access to its connection
// (later versions have Request::is_connection_closed), so the socket is found among the process's
// open sockets by the request's two addresses, and polled for the peer's close between tokens.
#pragma once
#include <httplib.h>

namespace vkllm::serve {

class Peer {
 public:
  explicit Peer(const httplib::Request& req);  // finds the connection's socket
  // True once the client has closed its side (or reset) the connection. A socket that was not
  // found reads as connected (the reply is generated in full, as before).
  bool gone() const;

 private:
  int fd_ = -1;
};

}  // namespace vkllm::serve
