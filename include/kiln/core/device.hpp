#pragma once
// Where a tensor's storage lives: kiln::cpu, or kiln::cuda (device{device_type::cuda, i}) when kiln's GPU device is
// compiled in (backend/gpu.hpp). Each kind of device has a backend struct that implements the device interface
// (backend/device.hpp): backend/cpu/device.hpp and backend/thrust/device.hpp.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

enum class device_type : std::uint8_t { cpu, cuda };

struct device {
    device_type type = device_type::cpu;
    int index = 0;
    friend constexpr bool operator==(const device&, const device&) = default;
};
inline constexpr device cpu{};
inline constexpr device cuda{device_type::cuda, 0};

// Bytes held by kiln's GPU device: in tensors now, at most at once, and how many allocations were made
// (kiln::cuda_memory_stats(); all zero in a program built without the device).
struct gpu_memory_stats {
    std::size_t allocated_bytes = 0;
    std::size_t peak_bytes = 0;
    std::size_t allocations = 0;
};

inline std::string to_string(const device& d) {
    return d.type == device_type::cpu ? "cpu" : "cuda:" + std::to_string(d.index);
}

}  // namespace kiln

