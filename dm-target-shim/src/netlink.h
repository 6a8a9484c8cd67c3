// Just enough generic netlink to talk to the kernel's nbd family, without a
// library: build a request of attributes, send it, read the reply.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cachecore/base/status.h"

namespace shim {

class GenlMessage {
 public:
  GenlMessage(uint16_t family, uint8_t command, uint8_t version);
  void PutU32(uint16_t type, uint32_t v) { Put(type, &v, 4); }
  void PutU64(uint16_t type, uint64_t v) { Put(type, &v, 8); }
  void PutString(uint16_t type, const std::string& s) { Put(type, s.c_str(), s.size() + 1); }
  void Put(uint16_t type, const void* data, size_t len);
  size_t BeginNest(uint16_t type);
  void EndNest(size_t at);
  std::vector<uint8_t>& bytes();

 private:
  std::vector<uint8_t> buf_;
};

// The top-level attributes of a reply, by type (raw payloads).
using GenlAttrs = std::map<uint16_t, std::string>;

// Sends `msg` on a new generic-netlink socket and returns the attributes of
// the reply (empty for a plain acknowledgement). The kernel's error comes
// back as a Status naming `what`.
cachecore::Result<GenlAttrs> GenlCall(GenlMessage& msg, const std::string& what);
// The id of a generic-netlink family, or kNotFound.
cachecore::Result<uint16_t> GenlFamily(const std::string& name);

}  // namespace shim
