// The process's own memory as Linux reports it (proc(5), /proc/self/status
// and clear_refs): the programs print their resident and peak resident
// bytes beside the engine's ledger (zs_offload_stress, bench_infinity).
#pragma once

namespace zeroshard::examples {

/// The /proc/self/status field `field` ("VmRSS", "VmHWM", ...), given
/// there in kB, in bytes; 0 when the file or the line is absent. Any
/// thread.
double process_status_bytes(const char* field);

/// Resets the peak resident size (VmHWM) to the current one by writing
/// "5" to /proc/self/clear_refs (Linux 4.0 and later). Throws
/// InvariantError when the file cannot be written.
void reset_peak_rss();

}  // namespace zeroshard::examples
