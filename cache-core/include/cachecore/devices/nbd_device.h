// NbdDevice: a BlockDevice over an NBD export, through libnbd: an origin
// that is a network volume (nbd://host:port/export, nbds://...,
// nbd+unix:///export?socket=PATH).
//
// Every request of every caller goes to the server at once: callers queue
// their commands on a connection and sleep until their own replies are in,
// while one thread per connection reads the replies. So the server sees as
// many requests in flight as the callers send, not one per connection.
// Requests of one SubmitAndWait share a connection; with a server that allows
// several connections (multi-conn, under which a flush on one connection
// covers writes completed on any) calls go to the least loaded; without it,
// everything goes over one. Requests above 32 MiB go out in pieces.
// Submit on a reactor's thread sends one command and returns; its reply
// posts the request back to that reactor (no thread waits for it).
//
// When the connection is lost every waiting and later call fails with an
// IoError naming the URI. The device must outlive its calls; destroying it
// stops and joins its threads.
#pragma once

#include <memory>
#include <string>

#include "cachecore/devices/block_device.h"

namespace cachecore {

struct NbdDeviceOptions {
  unsigned connections = 4;  // at most; one unless the server allows multi-conn
};

// Whether `path` is an NBD URI rather than a file or device path.
bool IsNbdUri(const std::string& path);

// Connects. kNotFound when nothing answers at the URI, kInvalidArgument for
// a malformed URI or an export whose size is not a multiple of 512.
Result<std::unique_ptr<BlockDevice>> OpenNbdDevice(const std::string& uri,
                                                   const NbdDeviceOptions& options = {});

}  // namespace cachecore
