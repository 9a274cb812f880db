#pragma once
// What the function and ONNX fuzz targets do with a model that loaded: call it on zeros of its signature (dynamic
// extents as traced) and read every byte of its results, so that a result larger than its storage shows under
// AddressSanitizer, and check its output signature against what the call returned (a std::logic_error, which the
// fuzzer reports, where they differ). A kiln::error from the call is a right answer too; the caller catches it.
#include <kiln/io.hpp>

#include <stdexcept>
#include <vector>

namespace kiln_fuzz {

inline void run_loaded(const kiln::loaded_function& f) {
    std::vector<kiln::tensor> args;
    std::size_t d = 0;
    for (const kiln::spec& s : f.signature()) {
        kiln::dims shape;
        shape.rank = static_cast<int>(s.shape.size());
        for (std::size_t i = 0; i < s.shape.size(); ++i)
            shape[static_cast<int>(i)] = s.shape[i] == kiln::dyn ? f.traced_extents()[d++] : s.shape[i];
        args.push_back(kiln::zeros(shape, s.dtype));
    }
    // The output signature must hold for the call (a wrong one is a crash here, not a refusal).
    const std::vector<kiln::spec> declared = f.output_signature();
    const std::vector<kiln::tensor> results = f(args);
    if (declared.size() != results.size()) throw std::logic_error("output_signature: wrong count");
    for (std::size_t k = 0; k < results.size(); ++k) {
        if (declared[k].dtype != results[k].dtype() || declared[k].shape.size() != static_cast<std::size_t>(results[k].dim()))
            throw std::logic_error("output_signature: wrong dtype or rank");
        for (std::size_t i = 0; i < declared[k].shape.size(); ++i)
            if (declared[k].shape[i] != kiln::dyn && declared[k].shape[i] != results[k].shape()[static_cast<int>(i)])
                throw std::logic_error("output_signature: wrong static extent");
    }
    unsigned sum = 0;
    for (const kiln::tensor& t : results) {
        const kiln::tensor c = t.contiguous();
        const auto* p = static_cast<const unsigned char*>(c.raw_data());
        for (std::size_t i = 0, n = static_cast<std::size_t>(c.numel()) * c.itemsize(); i < n; ++i) sum += p[i];
    }
    [[maybe_unused]] static volatile unsigned sink;
    sink = sum;
}

}  // namespace kiln_fuzz
