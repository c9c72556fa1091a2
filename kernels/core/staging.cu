/* The pool of page-locked staging buffers (kernels/core/staging.cuh). */
#include "staging.cuh"

namespace hyprof_cuda {

bool StagingPool::take(size_t bytes, Buf *b)
{
    {
        std::lock_guard<std::mutex> l(mu());
        std::vector<Buf> &v = list();
        for (size_t i = 0; i < v.size(); ++i)
            if (v[i].bytes >= bytes) {
                *b = v[i];
                v.erase(v.begin() + (ptrdiff_t)i);
                return true;
            }
    }
    bytes = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1); /* reusable */
    if (cudaHostAlloc(&b->p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        b->p = NULL;
        return false;
    }
    b->bytes = bytes;
    return true;
}

void StagingPool::give(Buf b)
{
    if (!b.p)
        return;
    {
        std::lock_guard<std::mutex> l(mu());
        std::vector<Buf> &v = list();
        size_t held = 0;
        for (const Buf &x : v)
            held += x.bytes;
        if (held + b.bytes <= kPoolBytes) {
            try {
                v.push_back(b);
                return;
            } catch (...) {
            }
        }
    }
    (void)cudaFreeHost(b.p);
    (void)cudaGetLastError();
}

std::mutex &StagingPool::mu()
{
    static std::mutex m;
    return m;
}

std::vector<StagingPool::Buf> &StagingPool::list()
{
    static std::vector<Buf> *v = new std::vector<Buf>(); /* never destroyed: no exit order issue */
    return *v;
}

Staging::~Staging()
{
    if (b_.p) {
        (void)cudaStreamSynchronize(s_);
        (void)cudaGetLastError();
        StagingPool::give(b_);
    }
}

} /* namespace hyprof_cuda */
