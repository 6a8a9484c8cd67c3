// NBD wire constants (doc/proto.md), big-endian on the wire.
#pragma once

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
constexpr uint32_t kOptInfo = 6;
constexpr uint32_t kOptGo = 7;

// Option replies.
constexpr uint32_t kRepAck = 1;
constexpr uint32_t kRepServer = 2;
constexpr uint32_t kRepInfo = 3;
constexpr uint32_t kRepErrUnsup = (1u << 31) + 1;
constexpr uint32_t kRepErrInvalid = (1u << 31) + 3;
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

}  // namespace shim::nbd
