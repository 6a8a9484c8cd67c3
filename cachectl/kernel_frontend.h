// The kernel block device over a running daemon's engine: ublk or kernel
// NBD, taken back from a daemon of this cache that died when it can be, and
// the device-mapper table over it (a plain /dev/mapper/NAME, or an online
// volume swapped onto it). Internal to the cachectl executable.
#pragma once

#include "daemon_state.h"

namespace cachectl {

// Connects the kernel device the spec asks for and puts the dm device over
// it; what it chose goes to d.frontend_note. Refuses (writing nothing) over
// a device a dead daemon left that cannot be taken back but is still in use.
Status StartKernelFrontEnd(Daemon& d);
// Takes the dm device off the kernel device and disconnects it; refused
// while the device is mounted (the cache then keeps serving).
Status StopKernelFrontEnd(Daemon& d);

}  // namespace cachectl
