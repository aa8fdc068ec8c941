// Owning types for CUDA streams and events.
//
// The header keeps CUDA's headers away from its users: CUstream_st* and
// CUevent_st* are exactly cudaStream_t and cudaEvent_t, so values of those
// types can be passed wherever zeroshard takes a `CUstream_st*`. A null
// stream is CUDA's legacy default stream.
#pragma once

struct CUstream_st;
struct CUevent_st;

namespace zeroshard {

/// An owned, non-blocking CUDA stream (cudaStreamCreateWithFlags with
/// cudaStreamNonBlocking, so it does not synchronise with the legacy
/// default stream) on the device current at construction. Move-only.
/// Thread safety: as a cudaStream_t. Errors: DeviceError.
class CudaStream {
 public:
  /// An empty handle (get() == nullptr, i.e. the legacy default stream).
  CudaStream() = default;
  /// Creates a stream; `priority` as cudaStreamCreateWithPriority (lower is
  /// higher priority; 0 is the default). Throws DeviceError.
  static CudaStream create(int priority = 0);
  /// Synchronises with and destroys the stream. Never throws.
  ~CudaStream();
  CudaStream(CudaStream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  /// The cudaStream_t (null for an empty handle).
  CUstream_st* get() const { return stream_; }
  /// Blocks until all work queued on the stream is done. Throws DeviceError.
  void synchronize() const;

 private:
  explicit CudaStream(CUstream_st* s) : stream_(s) {}
  CUstream_st* stream_ = nullptr;
};

/// An owned CUDA event without timing (cudaEventDisableTiming) unless asked
/// for, used to order streams and to ask whether work is done. Move-only.
/// Thread safety: as a cudaEvent_t. Errors: DeviceError.
class CudaEvent {
 public:
  /// An empty handle.
  CudaEvent() = default;
  /// Creates an event; `timing` enables cudaEventElapsedTime. Throws DeviceError.
  static CudaEvent create(bool timing = false);
  /// Destroys the event. Never throws.
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  /// The cudaEvent_t (null for an empty handle).
  CUevent_st* get() const { return event_; }
  /// cudaEventRecord on `stream` (null: legacy default stream).
  void record(CUstream_st* stream);
  /// Makes `stream` wait (on the device, not the host) for the work this
  /// event captured: cudaStreamWaitEvent.
  void make_wait(CUstream_st* stream) const;
  /// True once the captured work is done (cudaEventQuery); never blocks.
  /// Throws DeviceError if that work failed.
  bool query() const;
  /// Blocks the host until the captured work is done.
  void synchronize() const;
  /// Milliseconds between `start` and this event (both timing events,
  /// both complete): cudaEventElapsedTime.
  float elapsed_ms_since(const CudaEvent& start) const;

 private:
  explicit CudaEvent(CUevent_st* e) : event_(e) {}
  CUevent_st* event_ = nullptr;
};

/// Number of CUDA devices visible to this process; 0 when there is none or
/// the driver cannot be queried (no exception: callers use it to decide
/// whether to skip GPU work). Thread safety: safe from any thread.
int cuda_device_count() noexcept;

}  // namespace zeroshard
