// NBD wire constants (doc/proto.md), big-endian on the wire.
#pragma once

#include <cerrno>
#include <cstdint>

namespace shim::nbd {

constexpr uint64_t kInitMagic = 0x4e42444d41474943ull;    // "NBDMAGIC"
constexpr uint64_t kOptMagic = 0x49484156454f5054ull;     // "IHAVEOPT"
constexpr uint64_t kOptReplyMagic = 0x3e889045565a9ull;
constexpr uint32_t kRequestMagic = 0x25609513;
constexpr uint32_t kSimpleReplyMagic = 0x67446698;

// Handshake flags (server) and client flags.
constexpr uint16_t kFlagFixedNewstyle = 1 << 0;
constexpr uint16_t kFlagNoZeroes = 1 << 1;
constexpr uint32_t kClientFixedNewstyle = 1 << 0;
constexpr uint32_t kClientNoZeroes = 1 << 1;

// Options.
constexpr uint32_t kOptExportName = 1;
constexpr uint32_t kOptAbort = 2;
constexpr uint32_t kOptList = 3;
constexpr uint32_t kOptStartTls = 5;
constexpr uint32_t kOptInfo = 6;
constexpr uint32_t kOptGo = 7;

// Option replies.
constexpr uint32_t kRepAck = 1;
constexpr uint32_t kRepServer = 2;
constexpr uint32_t kRepInfo = 3;
constexpr uint32_t kRepErrUnsup = (1u << 31) + 1;
constexpr uint32_t kRepErrInvalid = (1u << 31) + 3;
constexpr uint32_t kRepErrTlsReqd = (1u << 31) + 5;
constexpr uint32_t kRepErrUnknown = (1u << 31) + 6;

// Info types.
constexpr uint16_t kInfoExport = 0;
constexpr uint16_t kInfoBlockSize = 3;

// Transmission flags.
constexpr uint16_t kTxHasFlags = 1 << 0;
constexpr uint16_t kTxSendFlush = 1 << 2;
constexpr uint16_t kTxSendFua = 1 << 3;
constexpr uint16_t kTxSendTrim = 1 << 5;
constexpr uint16_t kTxSendWriteZeroes = 1 << 6;
constexpr uint16_t kTxCanMultiConn = 1 << 8;

// Commands and command flags.
constexpr uint16_t kCmdRead = 0;
constexpr uint16_t kCmdWrite = 1;
constexpr uint16_t kCmdDisc = 2;
constexpr uint16_t kCmdFlush = 3;
constexpr uint16_t kCmdTrim = 4;
constexpr uint16_t kCmdWriteZeroes = 6;
constexpr uint16_t kCmdFlagFua = 1 << 0;

// Errors in simple replies (errno values of the protocol).
constexpr uint32_t kEio = 5;
constexpr uint32_t kEnomem = 12;
constexpr uint32_t kEinval = 22;
constexpr uint32_t kEnospc = 28;
constexpr uint32_t kEnotsup = 95;
constexpr uint32_t kEshutdown = 108;

// A simple reply's error is one of the protocol's own values (doc/proto.md
// lists EPERM, EIO, ENOMEM, EINVAL, ENOSPC, EOVERFLOW, ENOTSUP, ESHUTDOWN),
// numbered as on Linux whatever the host's errno values are. EBUSY has no
// value there: the engine is busy on the data path only once it is shut
// down, which is what ESHUTDOWN tells a client.
inline uint32_t NbdErrorOf(int err) {
  switch (err) {
    case 0: return 0;
    case EINVAL: return kEinval;
    case ENOSPC: return kEnospc;
    case EBUSY: return kEshutdown;
    case EOPNOTSUPP: return kEnotsup;
    default: return kEio;
  }
}

// A request's range against a device of `size` bytes: 0 when fine, else
// the protocol errno (a write past the end is ENOSPC, as the spec asks).
inline uint32_t CheckNbdRange(uint16_t type, uint64_t offset, uint32_t length, uint64_t size) {
  if (type == kCmdFlush) return 0;
  if (length == 0 || offset % 512 != 0 || length % 512 != 0) return kEinval;
  if (offset > size || length > size - offset) return type == kCmdRead ? kEinval : kEnospc;
  return 0;
}

}  // namespace shim::nbd
