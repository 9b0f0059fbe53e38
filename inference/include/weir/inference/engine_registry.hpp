// One engine per model file per process. Every caller that asks for a model by path gets the
// same Engine (and so the same weights and the same KV cache); the file is loaded on first use
// only, even when many callers ask at once.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "weir/inference/engine.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference {

class EngineRegistry {
 public:
  using Factory = std::function<Result<std::unique_ptr<Engine>>(std::shared_ptr<const Model>)>;

  static EngineRegistry& global();

  // The engine for `path` (compared by canonical path). On first use the model is loaded and
  // `make` builds its engine; errors are returned and nothing is cached, so a later call can
  // retry.
  Result<std::shared_ptr<Engine>> get(const std::filesystem::path& path, const Factory& make);
  // Drops the registry's reference (the engine lives on while callers hold it).
  void release(const std::filesystem::path& path);
  std::size_t loads() const;  // model files loaded so far
  std::size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::filesystem::path, std::shared_ptr<Engine>> engines_;  // GUARDED_BY(mu_)
  std::size_t loads_ = 0;                                             // GUARDED_BY(mu_)
};

}  // namespace weir::inference
