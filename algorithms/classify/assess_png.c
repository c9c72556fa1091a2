/* PNG encoding of an RGB picture (the report's class-map thumbnail), the
 * way libpng writes it by default, so the bytes equal those of GDAL's PNG
 * driver: 8-bit RGB, one IHDR, IDAT chunks of 8192 bytes, IEND. Each row
 * takes the filter (none, sub, up, average, Paeth; first wins ties) whose
 * output bytes, read as signed, have the smallest sum of magnitudes; zlib
 * level 6, Z_FILTERED, a window shrunk for small pictures and the zlib
 * header's window size lowered to the smallest that covers the data.
 * Builds without zlib store the rows uncompressed (a valid, larger PNG). */
#include "classifier.h"

#include <stdlib.h>
#include <string.h>
#ifdef HYPROF_HAVE_ZLIB
#include <zlib.h>
#else
/* PNG's CRC-32 (the zlib one), bit by bit: the chunks are few and small. */
static unsigned long crc32(unsigned long crc, const unsigned char *p, unsigned n)
{
    crc = ~crc & 0xffffffffUL;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ 0xedb88320UL : crc >> 1;
    }
    return ~crc & 0xffffffffUL;
}
#define uInt unsigned
#endif

static int paeth(int a, int b, int c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* One row filtered with the best filter: out[0] = filter type. */
static void filter_row(const uint8_t *row, const uint8_t *prev, size_t n, uint8_t *out,
                       uint8_t *tmp)
{
    unsigned long best = (unsigned long)-1;
    for (int t = 0; t < 5; t++) {
        unsigned long sum = 0;
        for (size_t i = 0; i < n; i++) {
            int a = i >= 3 ? row[i - 3] : 0, b = prev[i], c = i >= 3 ? prev[i - 3] : 0;
            int pred = t == 0 ? 0 : t == 1 ? a : t == 2 ? b : t == 3 ? (a + b) / 2
                                                                     : paeth(a, b, c);
            uint8_t v = (uint8_t)(row[i] - pred);
            tmp[i] = v;
            sum += v < 128 ? v : 256u - v;
        }
        if (sum < best) {
            best = sum;
            out[0] = (uint8_t)t;
            memcpy(out + 1, tmp, n);
        }
    }
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Appends a chunk; the buffer has room (sized by the caller). */
static size_t chunk(unsigned char *out, const char *type, const unsigned char *d, size_t n)
{
    put32(out, (uint32_t)n);
    memcpy(out + 4, type, 4);
    if (n)
        memcpy(out + 8, d, n);
    put32(out + 8 + n, (uint32_t)crc32(0L, out + 4, (uInt)(n + 4)));
    return n + 12;
}

/* The filtered rows (interleaved RGB, a filter byte first). */
static uint8_t *filtered(const uint8_t *rgb, size_t w, size_t h)
{
    size_t n = 3 * w;
    uint8_t *raw = malloc((n + 1) * h), *rows = malloc(2 * n), *tmp = malloc(n);
    for (size_t y = 0; raw && rows && tmp && y < h; y++) {
        uint8_t *row = rows + (y % 2) * n, *prev = rows + ((y + 1) % 2) * n;
        if (y == 0)
            memset(prev, 0, n);
        for (size_t x = 0; x < w; x++)
            for (int k = 0; k < 3; k++)
                row[3 * x + (size_t)k] = rgb[(size_t)k * w * h + y * w + x];
        filter_row(row, prev, n, raw + y * (n + 1), tmp);
    }
    free(rows);
    free(tmp);
    if (!rows || !tmp) {
        free(raw);
        return NULL;
    }
    return raw;
}

#ifdef HYPROF_HAVE_ZLIB
/* zlib stream of the filtered rows, its header's window field lowered as
 * libpng's optimize_cmf does. */
static unsigned char *deflated(const uint8_t *raw, size_t size, size_t *zlen)
{
    int bits = 15;
    if (size <= 16384) {
        for (size_t half = 1u << 14; size + 262 <= half; half >>= 1)
            bits--;
        bits = bits == 8 ? 9 : bits;
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    uLong cap = compressBound((uLong)size) + 64;
    unsigned char *out = malloc(cap);
    if (!out || deflateInit2(&z, 6, Z_DEFLATED, bits, 8, Z_FILTERED) != Z_OK) {
        free(out);
        return NULL;
    }
    z.next_in = (Bytef *)raw;
    z.avail_in = (uInt)size;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    *zlen = z.total_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(out);
        return NULL;
    }
    unsigned cinfo = out[0] >> 4;
    if (size <= 16384 && (out[0] & 0x0f) == 8 && cinfo <= 7 && size <= (1u << (cinfo + 7))) {
        size_t half = 1u << (cinfo + 7);
        do {
            half >>= 1;
            cinfo--;
        } while (cinfo > 0 && size <= half);
        out[0] = (unsigned char)((out[0] & 0x0f) | cinfo << 4);
        unsigned t = out[1] & 0xe0u;
        t += 0x1f - (((unsigned)out[0] << 8) + t) % 0x1f;
        out[1] = (unsigned char)t;
    }
    return out;
}
#else
/* zlib stream of the filtered rows in stored blocks (no compression). */
static unsigned char *deflated(const uint8_t *raw, size_t size, size_t *zlen)
{
    size_t nblk = size ? (size + 65534) / 65535 : 1;
    unsigned char *out = malloc(2 + 5 * nblk + size + 4), *o = out;
    if (!out)
        return NULL;
    *o++ = 0x78, *o++ = 0x01;
    uint32_t a = 1, b = 0;
    for (size_t off = 0, k = 0; k < nblk; k++) {
        size_t n = size - off < 65535 ? size - off : 65535;
        *o++ = k + 1 == nblk;
        o[0] = (unsigned char)n, o[1] = (unsigned char)(n >> 8);
        o[2] = (unsigned char)~n, o[3] = (unsigned char)(~n >> 8);
        memcpy(o + 4, raw + off, n);
        o += 4 + n;
        for (size_t i = 0; i < n; i++) {
            a = (a + raw[off + i]) % 65521;
            b = (b + a) % 65521;
        }
        off += n;
    }
    put32(o, b << 16 | a);
    *zlen = (size_t)(o + 4 - out);
    return out;
}
#endif

hyprof_status_t hyprof_png_encode_rgb(const uint8_t *rgb, size_t width, size_t height,
                                      unsigned char **png, size_t *len)
{
    *png = NULL;
    *len = 0;
    if (!width || !height || width > 0x7fffffff / 4 || height > 0x7fffffff / (3 * width + 1))
        return HYPROF_ERR_ARGUMENT;
    size_t size = (3 * width + 1) * height, zlen = 0;
    uint8_t *raw = filtered(rgb, width, height);
    unsigned char *z = raw ? deflated(raw, size, &zlen) : NULL;
    free(raw);
    size_t nidat = (zlen + 8191) / 8192;
    unsigned char *out = z ? malloc(8 + 25 + zlen + 12 * nidat + 12) : NULL;
    if (!out) {
        free(z);
        return HYPROF_ERR_NOMEM;
    }
    static const unsigned char sig[8] = {137, 80, 78, 71, 13, 10, 26, 10};
    unsigned char ihdr[13] = {0, 0, 0, 0, 0, 0, 0, 0, 8, 2, 0, 0, 0};
    put32(ihdr, (uint32_t)width);
    put32(ihdr + 4, (uint32_t)height);
    memcpy(out, sig, 8);
    size_t n = 8 + chunk(out + 8, "IHDR", ihdr, 13);
    for (size_t off = 0; off < zlen; off += 8192)
        n += chunk(out + n, "IDAT", z + off, zlen - off < 8192 ? zlen - off : 8192);
    n += chunk(out + n, "IEND", NULL, 0);
    free(z);
    *png = out;
    *len = n;
    return HYPROF_OK;
}
