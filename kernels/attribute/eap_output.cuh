/* The host side of the CUDA attribute profiles' output, prepared on a helper
 * thread while the device builds the trees (the twin of EMP's OutputPrep in
 * kernels/morphology/emp.cu): touches every page of the output (huge pages
 * where the kernel allows them, on the context's threads) and, when `pin`,
 * page-locks it, so that neither the page faults nor the locking come
 * before the first download. The output is overwritten entirely, so the
 * zero written into each page is harmless. */
#ifndef HYPROF_EAP_OUTPUT_CUH
#define HYPROF_EAP_OUTPUT_CUH

#include "../core/cuda_util.h"
#include "attribute/eap_impl.h"

#include <chrono>
#include <thread>

namespace eap {

class OutputPrep {
  public:
    OutputPrep() = default;
    OutputPrep(const OutputPrep &) = delete;
    OutputPrep &operator=(const OutputPrep &) = delete;
    ~OutputPrep()
    {
        join();
        unlock();
    }
    /* After the copies (or on an early return, after waiting for them). */
    void unlock()
    {
        if (locked_)
            (void)cudaDeviceSynchronize(); /* an early return may leave copies in flight */
        if (locked_)
            (void)cudaHostUnregister(locked_);
        locked_ = nullptr;
        (void)cudaGetLastError();
    }
    /* fault: touch the pages; pin: page-lock them (on `device`). */
    void start(const hyprof_ctx_t *ctx, unsigned char *p, size_t bytes, bool pin, bool fault,
               int device)
    {
        try {
            t_ = std::thread(&OutputPrep::work, this, ctx, p, bytes, pin, fault, device);
        } catch (...) {
            work(ctx, p, bytes, pin, fault, device);
        }
    }
    void join()
    {
        if (t_.joinable())
            t_.join();
    }
    double ms() const { return ms_; }
    double prefault_ms() const { return prefault_ms_; }

  private:
    static double since(std::chrono::steady_clock::time_point t0)
    {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
            .count();
    }
    void work(const hyprof_ctx_t *ctx, unsigned char *p, size_t bytes, bool pin, bool fault,
              int device)
    {
        const auto t0 = std::chrono::steady_clock::now();
        pin = pin && cudaSetDevice(device) == cudaSuccess;
        if (bytes) {
            const auto t1 = std::chrono::steady_clock::now();
            if (fault)
                hyprof__eap_prefault(ctx, p, bytes);
            prefault_ms_ = since(t1);
            if (pin && cudaHostRegister(p, bytes, cudaHostRegisterDefault) == cudaSuccess)
                locked_ = p;
            (void)cudaGetLastError();
        }
        ms_ = since(t0);
    }
    std::thread t_;
    void *locked_ = nullptr;
    double ms_ = 0.0, prefault_ms_ = 0.0;
};

} /* namespace eap */

#endif
