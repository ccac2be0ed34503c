// What a failed connect means to the person who typed the address. A port
// where something other than a ferry engine listens (a web server, sshd, the
// wrong port of the right host) fails the handshake with "bad frame magic
// 0x50545448" or a handshake that never finishes; said plainly, that is "is
// this a ferry engine? (it answered with 'HTTP')". The transport reports what
// happened on the wire; this file adds the reading a CLI user needs.
#pragma once

#include <memory>
#include <string>

#include "ferry/ferry.h"

namespace ferry::cli {

// `s` (a failed Engine::connect) with a hint appended where the peer did not
// act as a ferry engine: it answered with bytes that are not a ferry frame
// (the hint quotes their first four, escaped), or took the connection and
// never answered the handshake. Any other status comes back unchanged.
Status with_connect_hint(const Status& s);

// engine.connect(peer) within 10 s; on failure prints "ferry bench: WHAT:
// STATUS" (WHAT: "connect to PEER" unless given) with the hint above and
// exits 1. Blocks.
std::shared_ptr<Connection> connect_or_die(Engine& engine, const std::string& peer, const std::string& what = "");

}  // namespace ferry::cli
