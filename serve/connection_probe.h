// connection_probe.h: whether the client of an HTTP request still holds its connection, for the handler of a
// non-streaming request that waits while the model generates. cpp-httplib 0.11 (Debian's) gives a handler
// neither its socket nor a closed-connection check, so the socket is found by the request's addresses and
// probed with a non-blocking peek. Owns only that; cancelling the request is the server's (serve/server.cpp).
#pragma once
#include <string>

namespace tpshard::serve {

/// The file descriptor of this process's TCP socket whose local and peer addresses are the given ones (as
/// cpp-httplib's Request holds them: numeric host, port), or -1 when there is none. Scans /proc/self/fd; the
/// descriptor stays valid while the request's handler runs (cpp-httplib closes it after the handler returns).
int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port);

/// True when the peer of socket fd has closed or reset the connection: recv(MSG_PEEK | MSG_DONTWAIT)
/// returns 0 (end of stream) or an error other than "would block". Never blocks and consumes nothing, so
/// bytes the client sent ahead (a pipelined request) stay for cpp-httplib. A client that only shuts down its
/// sending side (shutdown(SHUT_WR)) while it waits for the answer reads as closed too.
bool peer_closed(int fd);

}  // namespace tpshard::serve
