#include "weir/inference/engine_registry.hpp"

#include <map>
#include <mutex>

namespace weir::inference {

struct EngineRegistry::Impl {
  mutable std::mutex mu;
  std::map<std::filesystem::path, std::shared_ptr<Engine>> engines;  // GUARDED_BY(mu)
  std::size_t loads = 0;                                             // GUARDED_BY(mu)
};

EngineRegistry::EngineRegistry() : impl_(std::make_unique<Impl>()) {}
EngineRegistry::~EngineRegistry() = default;

namespace {
std::filesystem::path key_of(const std::filesystem::path& p) {
  std::error_code ec;
  auto c = std::filesystem::canonical(p, ec);
  return ec ? std::filesystem::absolute(p).lexically_normal() : c;
}
}  // namespace

Result<std::shared_ptr<Engine>> EngineRegistry::get(const std::filesystem::path& path,
                                                    const Factory& make) {
  const auto key = key_of(path);
  std::lock_guard lock(impl_->mu);  // held while loading: concurrent first callers wait, load once
  if (auto it = impl_->engines.find(key); it != impl_->engines.end()) return it->second;
  auto model = Model::load(key);
  if (!model) return std::move(model).error();
  ++impl_->loads;
  auto engine = make(*model);
  if (!engine) return std::move(engine).error();
  std::shared_ptr<Engine> shared(std::move(*engine));
  impl_->engines.emplace(key, shared);
  return shared;
}

std::size_t EngineRegistry::loads() const {
  std::lock_guard lock(impl_->mu);
  return impl_->loads;
}

std::size_t EngineRegistry::size() const {
  std::lock_guard lock(impl_->mu);
  return impl_->engines.size();
}

}  // namespace weir::inference
