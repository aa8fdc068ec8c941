// zeroshard::torch::Unit: a libtorch module wrapped so that its forward
// gathers its parameters at ZeRO stage 3 (the unit wrapper of FSDP's
// fully_shard, in C++ where modules have no forward hooks).
//
// A libtorch module's forward is a plain member function that its parent
// calls directly, so nothing can run around it unless the module's type
// does. Unit<M> is M with its forward wrapped:
//
//   struct NetImpl : torch::nn::Module {
//     zeroshard::torch::Unit<torch::nn::LinearImpl> fc1{nullptr};
//     NetImpl() { fc1 = register_module("fc1", zeroshard::torch::Unit<torch::nn::LinearImpl>(784, 256)); }
//     torch::Tensor forward(torch::Tensor x) { return fc1(x); }   // unchanged
//   };
//
// Parameter names are M's own ("fc1.weight"): UnitImpl<M> derives from M.
// Unsharded (no shard() call), Unit<M> is M. Once shard() made it a unit,
// each forward call runs [Note: unit hooks] (libtorch/shard_state.h):
// unshard the unit (and the units whose parameters its submodules share),
// point the parameters at the gathered buffers, run M::forward, reshard,
// and hook the outputs so that their backward unshards again first.
#pragma once

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "runtime/sharding/flat_layout.h"

namespace zeroshard::torch {

class ShardState;      // libtorch/shard_state.h
struct ForwardRecord;  // one forward call of a unit (libtorch/shard_state.h)

/// The non-template part of every Unit wrapper: its link to the sharding
/// state, which shard() sets. Thread safety: as the Engine (one thread).
class UnitBase {
 public:
  virtual ~UnitBase() = default;

 protected:
  /// One forward call of the unit: constructed before M::forward (unshards
  /// at stage 3, checks the module), destroyed after it (reshards).
  /// Inactive (does nothing) when the module is not sharded.
  class ForwardCall {
   public:
    explicit ForwardCall(UnitBase& unit);
    ~ForwardCall();
    ForwardCall(const ForwardCall&) = delete;
    ForwardCall& operator=(const ForwardCall&) = delete;
    /// Hooks `out` (when it requires grad) so that the first gradient to
    /// reach any hooked output of this call unshards the unit again before
    /// its backward runs. Throws Error as ShardState::pre_backward, at
    /// backward time.
    void hook_output(const at::Tensor& out);

   private:
    std::shared_ptr<ShardState> state_;
    UnitId unit_ = -1;
    std::shared_ptr<ForwardRecord> record_;  // null when the call records nothing
  };

 private:
  friend class ShardState;
  std::weak_ptr<ShardState> state_;
  UnitId unit_ = -1;
};

namespace detail {

// Calls f on every tensor of a forward's result: a Tensor, or a tuple, pair
// or vector of them (nested).
template <class F>
void for_each_tensor(const at::Tensor& t, F& f) {
  f(t);
}
template <class F>
void for_each_tensor(const std::vector<at::Tensor>& v, F& f) {
  for (const at::Tensor& t : v) f(t);
}
template <class F, class... T>
void for_each_tensor(const std::tuple<T...>& t, F& f) {
  std::apply([&](const auto&... e) { (for_each_tensor(e, f), ...); }, t);
}
template <class F, class A, class B>
void for_each_tensor(const std::pair<A, B>& p, F& f) {
  for_each_tensor(p.first, f);
  for_each_tensor(p.second, f);
}

template <class T, class = void>
struct is_holder : std::false_type {};
template <class T>
struct is_holder<T, std::void_t<typename T::ContainedType>> : std::true_type {};

// Unit<torch::nn::Linear> and Unit<torch::nn::LinearImpl> both wrap LinearImpl.
template <class T>
struct impl_of {
  using type = T;
};
template <class T>
  requires is_holder<T>::value
struct impl_of<T> {
  using type = typename T::ContainedType;
};

}  // namespace detail

/// Module M (an nn::Module subclass) whose forward runs as one unit of a
/// sharded model. Constructors are M's. M::forward must be one function
/// (not overloaded, not a template: ModuleHolder's call operator needs
/// &UnitImpl::forward, as libtorch's own modules have it) returning a
/// Tensor, or a tuple, pair or vector of Tensors (the outputs whose
/// backward gathers the unit again at stage 3); other results do not
/// compile. Default arguments of M::forward are not carried over.
template <class M, class Forward = decltype(&M::forward)>
class UnitImpl;

template <class M, class R, class C, class... A>
class UnitImpl<M, R (C::*)(A...)> : public M, public UnitBase {
 public:
  using M::M;

  R forward(A... args) {
    ForwardCall call(*this);
    R out = M::forward(std::forward<A>(args)...);
    auto hook = [&call](const at::Tensor& t) { call.hook_output(t); };
    detail::for_each_tensor(out, hook);
    return out;
  }
};

/// The holder of UnitImpl<M> (as torch::nn::Linear holds LinearImpl); M may
/// be an Impl type or a holder type (Unit<torch::nn::Linear>).
template <class M>
class Unit : public ::torch::nn::ModuleHolder<UnitImpl<typename detail::impl_of<M>::type>> {
 public:
  using ::torch::nn::ModuleHolder<UnitImpl<typename detail::impl_of<M>::type>>::ModuleHolder;
};

}  // namespace zeroshard::torch
