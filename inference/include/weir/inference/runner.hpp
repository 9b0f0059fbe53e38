// Choosing where a model runs: CPU always; CUDA when the build has it and a device is present.
// `auto` picks CUDA when it can and says which device it chose, once, in the log.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "weir/inference/engine.hpp"
#include "weir/inference/model.hpp"

namespace weir::inference {

enum class Device { automatic, cpu, cuda };

// "auto", "cpu", "cuda". Errors: invalid_argument naming the choices.
Result<Device> parse_device(std::string_view name);
bool cuda_built();

struct RunnerChoice {
  std::unique_ptr<StepRunner> runner;
  Device device = Device::cpu;
  std::string description;  // "cpu (2 threads)", "cuda (NVIDIA H100 80GB HBM3)"
};

// Errors: unsupported when cuda is asked for and the build or the machine has none.
Result<RunnerChoice> make_runner(std::shared_ptr<const Model> model, Device device,
                                 int cpu_threads = 0);

}  // namespace weir::inference
