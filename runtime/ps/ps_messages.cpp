// The parameter-server messages' helpers; see runtime/ps/ps_messages.h.
#include "runtime/ps/ps_messages.h"

#include <algorithm>
#include <cstring>

namespace zeroshard {

PsStatus ps_error(std::int64_t step, const std::string& text) {
  PsStatus s{.ok = 0, .step = step};
  const std::size_t n = std::min(text.size(), kPsErrorBytes - 1);
  std::memcpy(s.text, text.data(), n);
  s.text[n] = '\0';
  return s;
}

std::uint64_t ps_layout_hash(const FlatLayout& layout) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* data, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  auto mix_int = [&](std::int64_t v) { mix(&v, sizeof v); };
  mix_int(layout.world_size());
  for (const UnitInfo& u : layout.units()) {
    mix(u.name.data(), u.name.size());
    mix_int(static_cast<std::int64_t>(u.numel));
    for (ParamId p : u.params) {
      const ParamInfo& info = layout.param(p);
      mix(info.name.data(), info.name.size());
      for (std::int64_t d : info.shape) mix_int(d);
      mix_int(info.group);
    }
  }
  return h;
}

FlatLayout ps_relaid_layout(const FlatLayout& layout, int world_size) {
  FlatLayout out;
  for (const UnitInfo& u : layout.units()) out.add_unit(u.name);
  // In id order, so that the ids are the same.
  for (const ParamInfo& p : layout.params()) out.add_param(p.unit, p.name, p.shape, p.group);
  out.finalize(world_size);
  return out;
}

void ps_send_piece(Communicator& world, int peer, std::span<const std::byte> bytes) {
  const std::uint64_t n = bytes.size();
  world.send(&n, sizeof n, DType::u8, peer);
  if (n > 0) world.send(bytes.data(), n, DType::u8, peer);
}

std::uint64_t ps_recv_piece(Communicator& world, int peer, std::vector<std::byte>& buf) {
  std::uint64_t n = 0;
  world.recv(&n, sizeof n, DType::u8, peer);
  if (n == kPsFailed) return n;
  buf.resize(n);
  if (n > 0) world.recv(buf.data(), n, DType::u8, peer);
  return n;
}

}  // namespace zeroshard
