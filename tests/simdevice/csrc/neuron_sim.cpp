// A simulated `neuron` device for testing the smoke suite without Trainium.
//
// Device memory is host memory, so every op can run through at::native::cpu_fallback; the fallback
// records each op as "executed on device" or "fell back to CPU" (per a configurable set), which is what
// torch_neuronx's op tracking reports on real hardware. Faults are injected here, at the kernel level,
// so the harness sees them exactly as it would see a misbehaving device.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace neuron_sim {
namespace {

std::atomic<int> g_device_count{2};
std::atomic<int> g_current_device{0};
std::atomic<bool> g_wrong_matmul{false};
std::atomic<bool> g_hang_matmul{false};

std::mutex g_mutex;
std::set<std::string> g_fallback_set;  // ops reported as CPU fallback rather than executed on the device
std::vector<std::string> g_fallback_ops;
std::vector<std::string> g_executed_ops;

const std::set<std::string>& matmul_ops() {
  static const std::set<std::string> ops = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"};
  return ops;
}

c10::DeviceIndex current_index() {
  return static_cast<c10::DeviceIndex>(g_current_device.load());
}

void sim_free(void* ptr) {
  std::free(ptr);
}

struct SimAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    // malloc(0) may return nullptr; allocate one byte so every storage has a distinct, valid pointer.
    void* data = std::malloc(nbytes == 0 ? 1 : nbytes);
    TORCH_CHECK(data != nullptr, "neuron_sim: out of memory allocating ", nbytes, " bytes");
    return {data, data, &sim_free, c10::Device(c10::DeviceType::PrivateUse1, current_index())};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &sim_free;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

SimAllocator g_allocator;

struct SimGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return c10::DeviceType::PrivateUse1;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return {c10::DeviceType::PrivateUse1, current_index()};
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() < g_device_count.load(), "neuron_sim: invalid device index ", int(d.index()));
    if (d.index() >= 0) {
      g_current_device = d.index();
    }
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) {
      g_current_device = d.index();
    }
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return s;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void synchronizeStream(const c10::Stream&) const override {}
  bool queryStream(const c10::Stream&) const override {
    return true;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimGuardImpl);

struct SimHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return g_device_count.load() > 0;
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return true;
  }
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(g_device_count.load());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    g_current_device = d;
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return current_index();
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = current_index();
    g_current_device = d;
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    return exchangeDevice(d);
  }
  at::Device getDeviceFromPtr(void*) const override {
    return {c10::DeviceType::PrivateUse1, current_index()};
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    // Random numbers come from the CPU generator; the harness creates inputs on the CPU and copies them.
    static at::Generator gen = at::detail::getDefaultCPUGenerator();
    return gen;
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    auto fresh = g_allocator.allocate(newsize);
    size_t keep = std::min(newsize, impl->nbytes());
    if (keep > 0 && impl->data() != nullptr) {
      std::memcpy(fresh.get(), impl->data(), keep);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

SimHooks g_hooks;

// Registered at load time so torch.accelerator sees the device as soon as the library is loaded.
struct Registrar {
  Registrar() {
    at::RegisterPrivateUse1HooksInterface(&g_hooks);
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_allocator);
  }
};
Registrar g_registrar;

at::Tensor as_cpu(const at::Tensor& t) {
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  const c10::DeviceGuard guard(c10::device_or_default(device));
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(size, &g_allocator, keys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  const c10::DeviceGuard guard(c10::device_or_default(device));
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(size, stride, &g_allocator, keys, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, storage_offset);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<at::MemoryFormat> fmt) {
  return at::native::resize_(self, C10_AS_INTARRAYREF_SLOW(size), fmt);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor dst_cpu = dst.is_cpu() ? dst : as_cpu(dst);
  at::Tensor src_cpu = self.is_cpu() ? self : as_cpu(self);
  dst_cpu.copy_(src_cpu, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::native::resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::native::_local_scalar_dense_cpu(as_cpu(self));
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage storage, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  return at::cpu::set_(self, storage, offset, size, stride);
}

void record(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_fallback_set.count(name)) {
    g_fallback_ops.push_back(name);
  } else {
    g_executed_ops.push_back(name);
  }
}

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op.schema().operator_name().name;
  const bool is_matmul = matmul_ops().count(name) > 0;
  if (is_matmul && g_hang_matmul.load()) {
    // Sleeps in C++ (the GIL is released by the Python binding), like a device call that never completes.
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  record(name);
  at::native::cpu_fallback(op, stack);
  if (is_matmul && g_wrong_matmul.load()) {
    for (const auto& value : *stack) {
      if (value.isTensor()) {
        value.toTensor().mul_(1.1);
      }
    }
  }
}

// Control surface for the fake torch_neuronx module; tensor-free ops need no pybind11 module.
std::vector<std::string> get_fallback_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_fallback_ops;
}

std::vector<std::string> get_executed_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_executed_ops;
}

void clear_op_tracking() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fallback_ops.clear();
  g_executed_ops.clear();
}

void set_fallback_set(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_fallback_set = std::set<std::string>(names.begin(), names.end());
}

int64_t device_count() {
  return g_device_count.load();
}

void configure(int64_t device_count, bool wrong_matmul, bool hang_matmul) {
  g_device_count = static_cast<int>(device_count);
  g_wrong_matmul = wrong_matmul;
  g_hang_matmul = hang_matmul;
}

}  // namespace

TORCH_LIBRARY(neuron_sim, m) {
  m.def("get_fallback_ops() -> str[]", &get_fallback_ops);
  m.def("get_executed_ops() -> str[]", &get_executed_ops);
  m.def("clear_op_tracking() -> ()", &clear_op_tracking);
  m.def("set_fallback_set(str[] names) -> ()", &set_fallback_set);
  m.def("device_count() -> int", &device_count);
  m.def("configure(int device_count, bool wrong_matmul, bool hang_matmul) -> ()", &configure);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("as_strided", as_strided);
  m.impl("resize_", resize_);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("view", view);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>());
}

}  // namespace neuron_sim
