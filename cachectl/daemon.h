// The cache daemon: one process per cache. It owns the devices, the
// metadata store and the engine, serves the cached volume over NBD and
// answers the control socket. Started by `cachectl attach` and `start`.
#pragma once

#include <string>
#include <vector>

#include "cachecore/engine/engine.h"
#include "cache_key_source.h"
#include "paths.h"
#include "shim/nbd_tls.h"

namespace cachectl {

// NBD clients a cache serves at once unless attach says otherwise
// (--nbd-connections); the kernel's own connections are not counted.
inline constexpr unsigned kDefaultNbdConnections = 32;

struct DaemonSpec {
  std::string name;
  Dirs dirs;
  std::string origin;
  std::string cache;
  bool create = false;   // attach: format the cache; start: open it warm
  cachecore::Replace replace = cachecore::Replace::kNothing;  // what attach may format over
  cachecore::EngineConfig engine;
  std::string tcp_address;  // NBD over TCP only when given
  bool tcp_insecure = false;  // --insecure: tcp_address need not be a loopback address
  // NBD over TLS for TCP clients: a PSK file or an X.509 directory
  // (shim/nbd_tls.h); at most one, absolute paths.
  std::string tls_psk, tls_cert;
  // attach --listen: Prometheus's /metrics on this host:port (empty: off);
  // a loopback address unless tcp_insecure.
  std::string metrics_listen;
  unsigned nbd_connections = kDefaultNbdConnections;  // NBD clients served at once
  // The group that may use the NBD socket and read stats (sockets 0660);
  // -1: root only (0600).
  int socket_group = -1;
  // "auto": ublk, else kernel NBD, under /dev/mapper/NAME where the kernel
  // has them and device-mapper, else the NBD socket alone; "ublk", "nbd":
  // that one or fail; "socket": the NBD socket alone.
  std::string frontend = "auto";
  // Online attach to a device-mapper volume in use: its name and the table
  // it had. The engine's origin is a hidden device with that table; the
  // volume is reloaded to point at the cached device, and back at detach.
  std::string online_volume;
  std::string online_table;
  // Encryption at rest (attach --encrypt): where the key is read from at
  // every start (the key itself is kept nowhere); empty: not encrypted.
  KeySource key;
};

// Checks a --frontend value; the message lists the valid ones.
cachecore::Status CheckFrontend(const std::string& frontend);

// --nbd-tcp's address: OK when empty, a loopback address, with TLS, or
// `insecure`; kInvalidArgument saying why otherwise (plain NBD is neither
// encrypted nor authenticated).
cachecore::Status CheckTcpExport(const DaemonSpec& spec);

// --listen's address: OK when empty, a loopback address, or with
// --insecure (the counters say what the volume's users do).
cachecore::Status CheckMetricsListen(const DaemonSpec& spec);

// The TLS credentials the spec names (null when none), read and checked:
// NotFound or InvalidArgument naming the file otherwise.
cachecore::Result<std::shared_ptr<const shim::NbdTls>> LoadTls(const DaemonSpec& spec);

// A --nbd-connections value: 1 to 1024.
cachecore::Result<unsigned> ParseNbdConnections(const std::string& text);

// Forks the daemon and waits until it serves (OK) or has failed; the
// failure comes back as the daemon saw it, before anything was served.
// `notices`, when given, receives one line per thing the daemon did on its
// way up that the user should hear of (a superblock rewritten from the
// metadata store), whether it then served or failed.
cachecore::Status LaunchDaemon(const DaemonSpec& spec, std::vector<std::string>* notices = nullptr);

// The spec of an attached cache from its saved configuration, to start it
// (or rebuild it): devices, line size (the superblock's must agree), front
// end, TCP address, socket group, online volume. kInvalidArgument when the
// saved socket group no longer exists.
cachecore::Result<DaemonSpec> SpecFromConfig(const Dirs& dirs, const std::string& name,
                                             CacheConfig& config);

}  // namespace cachectl
