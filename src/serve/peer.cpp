#include "serve/peer.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace vkllm::serve {

namespace {

// The numeric host and port of an address, as cpp-httplib writes a request's addresses.
bool host_port(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(p);
  return true;
}

}  // namespace

Peer::Peer(const httplib::Request& req) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int fd = std::atoi(name.c_str());
    sockaddr_storage local{}, remote{};
    socklen_t ll = sizeof local, rl = sizeof remote;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &rl) != 0)
      continue;  // not a socket, or not a connected one
    std::string lh, rh;
    int lp = 0, rp = 0;
    if (host_port(local, ll, lh, lp) && host_port(remote, rl, rh, rp) && lp == req.local_port &&
        rp == req.remote_port && rh == req.remote_addr && lh == req.local_addr) {
      fd_ = fd;
      return;
    }
  }
}

bool Peer::gone() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace vkllm::serve
