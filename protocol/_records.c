/* The per-message loops of protocol/records.py in C: the produce hot path.
 *
 * assign_loop  is _py_assign_loop   (validate_and_assign's loop over shallow entries),
 * scan_inner   is _py_scan_inner    (the check of a wrapper's decompressed inner set),
 * shallow_loop is _py_shallow_loop  (validate_given_offsets, the follower's shallow check),
 * index_entries is entries._py_index_entries (the entries a segment's indexes point at),
 * magic_1_messages is record_batch._py_magic_1_messages (a magic 2 batch's records section
 *              written as magic 1 messages), check_records is record_batch._records_max_timestamp
 *              (a magic 2 batch's records checked for a log of magic 2: None where Python raises),
 *              batch_records is record_batch._py_batch_records (a magic 2 batch's records read,
 *              for consumers and the cleaner: None where Python raises), and crc32c checks a
 *              magic 2 batch.
 *
 * Each takes the same arguments and returns the same values as its Python twin, and refuses
 * a set with the same RecordError (same code, same message): records.py picks one or the
 * other at import and the test suite runs against both. Decompression, the magic 0
 * recompression and the LogAppendTime rewrite of wrappers stay in Python (assign_loop calls
 * back _assign_wrapper for each wrapper): they are per wrapper, not per message. The entry
 * layouts are described in entries.py's module docstring.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define LOG_OVERHEAD 12
#define CRC_POSITION 12
#define MAGIC_POSITION 16
#define ATTRIBUTES_POSITION 17
#define TIMESTAMP_POSITION 18
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_BIT 0x08
#define NO_TIMESTAMP (-1)
/* offset, size, crc, magic, attributes, [timestamp,] key length, value length: per magic */
#define HEAD_SIZE(magic) ((magic) ? 34 : 26)
#define MIN_MESSAGE_SIZE(magic) ((magic) ? 22 : 14)
/* where the value length field is when the key is null, relative to the entry start */
#define NULL_KEY_VALUE_POSITION(magic) ((magic) ? 30 : 22)
#define MIN_ENTRY_SIZE 26
/* Magic 2 batches: the CRC-32C covers attributes..end; lastOffsetDelta and maxTimestamp. */
#define BATCH_MAGIC 2
#define MIN_BATCH_SIZE 49
#define BATCH_CRC_START 21
#define BATCH_LAST_OFFSET_DELTA_POSITION 23
#define BATCH_MAX_TIMESTAMP_POSITION 35

static PyObject *RecordError, *CORRUPT_MESSAGE, *MESSAGE_TOO_LARGE, *INVALID_TIMESTAMP;

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#include <wmmintrin.h>
#define HAVE_X86_CRC32C 1
#endif

static inline int64_t read_int64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline uint32_t read_uint32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int32_t read_int32(const unsigned char *p) { return (int32_t)read_uint32(p); }

static inline void write_int64(unsigned char *p, int64_t value)
{
    uint64_t v = (uint64_t)value;
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

static inline void write_uint32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Slicing-by-8 tables and loop for a reflected CRC-32 of the given polynomial: zlib's (IEEE)
   for magic 0/1 messages, Castagnoli's for magic 2 batches. */
typedef uint32_t CrcTables[8][256];

static void make_crc_tables(CrcTables tables, uint32_t polynomial)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ polynomial : c >> 1;
        tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            tables[t][i] = (tables[t - 1][i] >> 8) ^ tables[0][tables[t - 1][i] & 0xFF];
}

/* The CRC register c after p[0..n) (the caller inverts it before and after). */
static inline uint32_t crc_update_by_tables(const CrcTables t, uint32_t c, const unsigned char *p, size_t n)
{
    while (n >= 8) {
        uint32_t a = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t b = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = t[7][a & 0xFF] ^ t[6][(a >> 8) & 0xFF] ^ t[5][(a >> 16) & 0xFF] ^ t[4][a >> 24] ^ t[3][b & 0xFF] ^
            t[2][(b >> 8) & 0xFF] ^ t[1][(b >> 16) & 0xFF] ^ t[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = t[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

static inline uint32_t crc_by_tables(const CrcTables t, const unsigned char *p, size_t n)
{
    return crc_update_by_tables(t, 0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

#ifdef HAVE_X86_CRC32C
/* The CRC-32 (IEEE) register after p[0..n), n a multiple of 16 and at least 64, by folding
   16-byte blocks with carry-less multiplications ("Fast CRC Computation for Generic
   Polynomials Using PCLMULQDQ Instruction", Gopal et al., Intel 2009): some 3 times the table
   loop on a 100-byte message. The constants are x^k mod P(x), bit-reflected, for the fold
   distances used (512+64, 512, 128+64, 128, 64 bits), P itself and its Barrett quotient. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_ieee_update_folded(uint32_t c, const unsigned char *p,
                                                                                 size_t n)
{
    const __m128i fold_4 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
    const __m128i fold_1 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
    const __m128i fold_64 = _mm_set_epi64x(0, 0x163cd6124);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641, 0x1db710641);
    const __m128i low_32_of_each_64 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2, x3, x4, x5, x6, x7, x8;
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    if (n >= 128) {
        x2 = _mm_loadu_si128((const __m128i *)(p + 16));
        x3 = _mm_loadu_si128((const __m128i *)(p + 32));
        x4 = _mm_loadu_si128((const __m128i *)(p + 48));
        p += 64;
        n -= 64;
        for (; n >= 64; p += 64, n -= 64) {
            x5 = _mm_clmulepi64_si128(x1, fold_4, 0x00);
            x6 = _mm_clmulepi64_si128(x2, fold_4, 0x00);
            x7 = _mm_clmulepi64_si128(x3, fold_4, 0x00);
            x8 = _mm_clmulepi64_si128(x4, fold_4, 0x00);
            x1 = _mm_clmulepi64_si128(x1, fold_4, 0x11);
            x2 = _mm_clmulepi64_si128(x2, fold_4, 0x11);
            x3 = _mm_clmulepi64_si128(x3, fold_4, 0x11);
            x4 = _mm_clmulepi64_si128(x4, fold_4, 0x11);
            x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)p));
            x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(p + 16)));
            x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(p + 32)));
            x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(p + 48)));
        }
        /* Four lanes into one. */
        const __m128i lanes[3] = {x2, x3, x4};
        for (int i = 0; i < 3; i++) {
            x5 = _mm_clmulepi64_si128(x1, fold_1, 0x00);
            x1 = _mm_clmulepi64_si128(x1, fold_1, 0x11);
            x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), lanes[i]);
        }
    } else {
        p += 16;
        n -= 16;
    }
    for (; n >= 16; p += 16, n -= 16) {
        x5 = _mm_clmulepi64_si128(x1, fold_1, 0x00);
        x1 = _mm_clmulepi64_si128(x1, fold_1, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)p));
    }
    /* 128 bits to 64, then Barrett reduction to the 32-bit register. */
    x2 = _mm_clmulepi64_si128(x1, fold_1, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, low_32_of_each_64);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(x1, fold_64, 0x00), x2);
    x2 = _mm_and_si128(x1, low_32_of_each_64);
    x2 = _mm_clmulepi64_si128(x2, barrett, 0x10);
    x2 = _mm_and_si128(x2, low_32_of_each_64);
    x2 = _mm_clmulepi64_si128(x2, barrett, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

/* CRC-32 (IEEE, as zlib's). zlib's crc32 costs about 0.2-0.3 us a call on a 100-byte message
   here (its braided loop has a fixed cost per call), three to five times the table loop; on
   long inputs zlib is as fast or faster, so it takes those when the CPU cannot fold. */
#define SHORT_CRC_LIMIT 512
static CrcTables crc_table;
#ifdef HAVE_X86_CRC32C
static int crc32_ieee_folds; /* the CPU has PCLMULQDQ and SSE4.1 (set at import) */
#endif

static uint32_t crc32_ieee_portable(const unsigned char *p, size_t n)
{
    if (n >= SHORT_CRC_LIMIT)
        return (uint32_t)crc32(0L, p, (uInt)n);
    return crc_by_tables(crc_table, p, n);
}

static uint32_t crc32_ieee(const unsigned char *p, size_t n)
{
#ifdef HAVE_X86_CRC32C
    if (crc32_ieee_folds && n >= 64) {
        size_t folded = n & ~(size_t)15;
        uint32_t c = crc32_ieee_update_folded(0xFFFFFFFFu, p, folded);
        return crc_update_by_tables(crc_table, c, p + folded, n - folded) ^ 0xFFFFFFFFu;
    }
#endif
    return crc32_ieee_portable(p, n);
}

static inline uint32_t message_crc(const unsigned char *buf, Py_ssize_t position, Py_ssize_t end)
{
    return crc32_ieee(buf + position + MAGIC_POSITION, (size_t)(end - position - MAGIC_POSITION));
}

/* The CRC `function` computes of a bytes-like object, as a Python int. */
static PyObject *crc_of(PyObject *arg, uint32_t (*function)(const unsigned char *, size_t))
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = function(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *crc32_function(PyObject *self, PyObject *arg) { return crc_of(arg, crc32_ieee); }

static PyObject *crc32_portable_function(PyObject *self, PyObject *arg) { return crc_of(arg, crc32_ieee_portable); }

/* Raise RecordError(code, message formatted as by PyUnicode_FromFormat); always NULL. */
static PyObject *refuse(PyObject *code, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    PyObject *message = PyUnicode_FromFormatV(format, args);
    va_end(args);
    if (message == NULL)
        return NULL;
    PyObject *error = PyObject_CallFunctionObjArgs(RecordError, code, message, NULL);
    Py_DECREF(message);
    if (error != NULL) {
        PyErr_SetObject(RecordError, error);
        Py_DECREF(error);
    }
    return NULL;
}

/* A message's fixed head, read as the layout of `magic` says (the set's or the wrapper's: a
   message of another magic is refused after its size is checked). */
typedef struct {
    int64_t offset;
    int32_t size;
    uint32_t crc;
    int magic;
    int attributes;
    int64_t timestamp; /* NO_TIMESTAMP for magic 0 */
    int32_t key_length;
    int32_t value_length; /* right only when the key is null: see lengths_check */
    int64_t end;          /* the entry's end in its buffer */
} Head;

static inline void read_head(const unsigned char *b, Py_ssize_t position, int magic, Head *h)
{
    const unsigned char *p = b + position;
    h->offset = read_int64(p);
    h->size = read_int32(p + 8);
    h->crc = read_uint32(p + CRC_POSITION);
    h->magic = (int8_t)p[MAGIC_POSITION];
    h->attributes = (int8_t)p[ATTRIBUTES_POSITION];
    h->timestamp = magic ? read_int64(p + TIMESTAMP_POSITION) : NO_TIMESTAMP;
    h->key_length = read_int32(p + HEAD_SIZE(magic) - 8);
    h->value_length = read_int32(p + HEAD_SIZE(magic) - 4);
    h->end = (int64_t)position + LOG_OVERHEAD + h->size;
}

/* Key and value lengths must add up to the message's end: 0 if they do, else 'k' (bad key
   length) or 'v' (bad value length, then stored in h->value_length for the message). */
static inline int lengths_check(const unsigned char *b, Py_ssize_t position, int magic, Head *h)
{
    int64_t value_length_position = position + NULL_KEY_VALUE_POSITION(magic);
    if (h->key_length != -1) {
        value_length_position += h->key_length;
        if (h->key_length < -1 || value_length_position + 4 > h->end)
            return 'k';
        h->value_length = read_int32(b + value_length_position);
    }
    if (value_length_position + 4 + (h->value_length > 0 ? h->value_length : 0) != h->end || h->value_length < -1)
        return 'v';
    return 0;
}

/* The running max timestamp and the first untimed offset of a set (see ValidatedSet). */
typedef struct {
    int64_t max_timestamp;
    int64_t offset_of_max_timestamp;
    int64_t first_untimed;
} RunningMax;

static inline void running_max_add(RunningMax *m, int64_t last_offset, int64_t entry_timestamp)
{
    if (entry_timestamp > m->max_timestamp) {
        m->max_timestamp = entry_timestamp;
        m->offset_of_max_timestamp = last_offset;
    } else if (entry_timestamp < 0 && m->first_untimed < 0) {
        m->first_untimed = last_offset;
    }
}

static PyObject *assign_loop(PyObject *self, PyObject *args)
{
    PyObject *buf, *assign_wrapper;
    long long next_offset, now_ms, max_message_bytes, earliest, latest;
    int log_append_time, fresh = 0;
    if (!PyArg_ParseTuple(args, "OLLLpLLO|p:assign_loop", &buf, &next_offset, &now_ms, &max_message_bytes,
                          &log_append_time, &earliest, &latest, &assign_wrapper, &fresh))
        return NULL;
    /* The output is the one copy of the set: a bytes object nobody else has seen yet, or the
       fresh bytearray itself, written in place here, and through `writable` (a memoryview of
       its memory) by _assign_wrapper. */
    PyObject *out, *writable = NULL;
    unsigned char *b;
    Py_ssize_t length;
    if (fresh) {
        if (!PyByteArray_Check(buf)) {
            PyErr_SetString(PyExc_TypeError, "assign_loop: a fresh set must be a bytearray");
            return NULL;
        }
        /* No one resizes it while this runs: the caller made it and _assign_wrapper only
           writes into it. */
        Py_INCREF(buf);
        out = buf;
        b = (unsigned char *)PyByteArray_AS_STRING(out);
        length = PyByteArray_GET_SIZE(out);
    } else {
        Py_buffer input;
        if (PyObject_GetBuffer(buf, &input, PyBUF_SIMPLE) < 0)
            return NULL;
        out = PyBytes_FromStringAndSize(input.buf, input.len);
        PyBuffer_Release(&input);
        if (out == NULL)
            return NULL;
        b = (unsigned char *)PyBytes_AS_STRING(out);
        length = PyBytes_GET_SIZE(out);
    }
    PyObject *replacements = NULL, *result = NULL;
    RunningMax ix = {NO_TIMESTAMP, -1, -1};
    int64_t offset = next_offset;
    int64_t max_size = max_message_bytes - LOG_OVERHEAD;
    int set_magic = length > MAGIC_POSITION ? b[MAGIC_POSITION] : -1;
    if (set_magic != 0 && set_magic != 1) {
        refuse(CORRUPT_MESSAGE, "message set starts with unknown magic %d or is truncated", set_magic);
        goto done;
    }
    const Py_ssize_t head_size = HEAD_SIZE(set_magic), min_size = MIN_MESSAGE_SIZE(set_magic);
    Py_ssize_t position = 0;
    while (position < length) {
        const unsigned char *p = b + position;
        if (length - position < head_size) {
            if (length - position >= MIN_ENTRY_SIZE && read_int32(p + 8) < min_size)
                refuse(CORRUPT_MESSAGE, "message at byte %zd has impossible size %d", position, read_int32(p + 8));
            else
                refuse(CORRUPT_MESSAGE, "message set ends in a truncated message at byte %zd", position);
            goto done;
        }
        Head h;
        read_head(b, position, set_magic, &h);
        int32_t size = h.size;
        int magic = h.magic, attributes = h.attributes;
        int64_t timestamp = h.timestamp, end = h.end;
        if (size < min_size) {
            refuse(CORRUPT_MESSAGE, "message at byte %zd has impossible size %d", position, size);
            goto done;
        }
        if (end > length) {
            refuse(CORRUPT_MESSAGE, "message set ends in a truncated message at byte %zd", position);
            goto done;
        }
        if (size > max_size) {
            refuse(MESSAGE_TOO_LARGE, "message of %lld bytes (log overhead included) exceeds max.message.bytes %lld",
                   (long long)size + LOG_OVERHEAD, max_message_bytes);
            goto done;
        }
        if (magic != set_magic) {
            refuse(CORRUPT_MESSAGE, "message set mixes magic %d and magic %d", set_magic, magic);
            goto done;
        }
        if (!fresh && message_crc(b, position, end) != h.crc) {
            refuse(CORRUPT_MESSAGE, "message at byte %zd fails its CRC check", position);
            goto done;
        }
        switch (lengths_check(b, position, set_magic, &h)) {
        case 'k':
            refuse(CORRUPT_MESSAGE, "message at byte %zd has a bad key length %d", position, h.key_length);
            goto done;
        case 'v':
            refuse(CORRUPT_MESSAGE, "message at byte %zd has a bad value length %d", position, h.value_length);
            goto done;
        }

        int64_t entry_timestamp, last_offset;
        if (attributes & CODEC_MASK) {
            if (writable == NULL && (writable = PyMemoryView_FromMemory((char *)b, length, PyBUF_WRITE)) == NULL)
                goto done;
            PyObject *answer = PyObject_CallFunction(assign_wrapper, "OnnLLOLL", writable, position, (Py_ssize_t)end,
                                                     (long long)offset, now_ms,
                                                     log_append_time ? Py_True : Py_False, earliest, latest);
            if (answer == NULL)
                goto done;
            PyObject *replacement;
            long long wrapper_next, wrapper_timestamp;
            if (!PyArg_ParseTuple(answer, "LLO", &wrapper_next, &wrapper_timestamp, &replacement)) {
                Py_DECREF(answer);
                goto done;
            }
            if (replacement != Py_None) {
                Py_ssize_t replacement_size = PyObject_Length(replacement);
                int failed = replacement_size < 0;
                if (!failed && replacement_size > max_message_bytes) {
                    refuse(MESSAGE_TOO_LARGE,
                           "message of %zd bytes (log overhead included) exceeds max.message.bytes %lld",
                           replacement_size, max_message_bytes);
                    failed = 1;
                }
                if (!failed && replacements == NULL)
                    failed = (replacements = PyDict_New()) == NULL;
                if (!failed) {
                    PyObject *key = PyLong_FromSsize_t(position);
                    failed = key == NULL || PyDict_SetItem(replacements, key, replacement) < 0;
                    Py_XDECREF(key);
                }
                if (failed) {
                    Py_DECREF(answer);
                    goto done;
                }
            }
            Py_DECREF(answer);
            offset = wrapper_next;
            entry_timestamp = wrapper_timestamp;
            last_offset = offset - 1;
        } else {
            unsigned char *w = b + position;
            if (magic == 0) {
                entry_timestamp = NO_TIMESTAMP;
            } else if (attributes & TIMESTAMP_TYPE_BIT) {
                refuse(INVALID_TIMESTAMP, "message at byte %zd has the LogAppendTime type set; only brokers set it",
                       position);
                goto done;
            } else if (log_append_time) {
                entry_timestamp = now_ms;
                w[ATTRIBUTES_POSITION] = (unsigned char)((attributes | TIMESTAMP_TYPE_BIT) & 0xFF);
                write_int64(w + TIMESTAMP_POSITION, now_ms);
                write_uint32(w + CRC_POSITION, message_crc(b, position, end));
            } else {
                entry_timestamp = timestamp;
                if ((timestamp < earliest || timestamp > latest) && timestamp != NO_TIMESTAMP) {
                    refuse(INVALID_TIMESTAMP,
                           "timestamp %lld is out of the accepted range around %lld "
                           "(message.timestamp.difference.max.ms)",
                           (long long)timestamp, now_ms);
                    goto done;
                }
            }
            write_int64(w, offset);
            last_offset = offset;
            offset += 1;
        }
        running_max_add(&ix, last_offset, entry_timestamp);
        position = (Py_ssize_t)end;
    }
    result = Py_BuildValue("(OLLLLO)", out, (long long)offset, (long long)ix.max_timestamp,
                           (long long)ix.offset_of_max_timestamp, (long long)ix.first_untimed,
                           replacements ? replacements : Py_None);
done:
    Py_XDECREF(replacements);
    Py_XDECREF(writable);
    Py_DECREF(out);
    return result;
}

static PyObject *scan_inner(PyObject *self, PyObject *args)
{
    PyObject *inner, *accepted;
    int magic, check_crc = 1;
    long long wrapper_offset, now_ms, earliest = 0, latest = 0;
    if (!PyArg_ParseTuple(args, "OiLLO|p:scan_inner", &inner, &magic, &wrapper_offset, &now_ms, &accepted,
                          &check_crc))
        return NULL;
    int check_timestamps = accepted != Py_None;
    if (check_timestamps && !PyArg_ParseTuple(accepted, "LL", &earliest, &latest))
        return NULL;
    if (magic != 0 && magic != 1) {
        PyErr_Format(PyExc_ValueError, "magic must be 0 or 1, not %d", magic);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(inner, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t length = view.len;
    PyObject *result = NULL;
    const Py_ssize_t head_size = HEAD_SIZE(magic), min_size = MIN_MESSAGE_SIZE(magic);
    long long count = 0;
    int64_t max_timestamp = NO_TIMESTAMP;
    Py_ssize_t position = 0;
    while (position < length) {
        const unsigned char *p = b + position;
        if (length - position < head_size) {
            if (length - position < MIN_ENTRY_SIZE)
                refuse(CORRUPT_MESSAGE, "compressed message at offset %lld has a truncated inner set", wrapper_offset);
            else
                refuse(CORRUPT_MESSAGE, "compressed message at offset %lld has an inner message of bad size %d",
                       wrapper_offset, read_int32(p + 8));
            goto done;
        }
        Head h;
        read_head(b, position, magic, &h);
        int64_t inner_offset = h.offset, timestamp = h.timestamp, end = h.end;
        if (h.size < min_size || end > length) {
            refuse(CORRUPT_MESSAGE, "compressed message at offset %lld has an inner message of bad size %d",
                   wrapper_offset, h.size);
            goto done;
        }
        if (h.magic != magic) {
            refuse(CORRUPT_MESSAGE, "compressed message at offset %lld (magic %d) holds a magic %d message",
                   wrapper_offset, magic, h.magic);
            goto done;
        }
        if (h.attributes & CODEC_MASK) {
            refuse(CORRUPT_MESSAGE, "compressed message at offset %lld nests compression", wrapper_offset);
            goto done;
        }
        if (check_crc && message_crc(b, position, end) != h.crc) {
            refuse(CORRUPT_MESSAGE, "inner message %lld of compressed message at offset %lld fails its CRC check",
                   count, wrapper_offset);
            goto done;
        }
        switch (lengths_check(b, position, magic, &h)) {
        case 'k':
            refuse(CORRUPT_MESSAGE, "inner message of offset %lld has a bad key length", wrapper_offset);
            goto done;
        case 'v':
            refuse(CORRUPT_MESSAGE, "inner message of offset %lld has a bad value length", wrapper_offset);
            goto done;
        }
        if (magic == 1) {
            if (inner_offset != count) {
                refuse(CORRUPT_MESSAGE,
                       "inner message %lld of compressed message at offset %lld has relative offset %lld, not %lld",
                       count, wrapper_offset, (long long)inner_offset, count);
                goto done;
            }
            if (check_timestamps && (timestamp < earliest || timestamp > latest) && timestamp != NO_TIMESTAMP) {
                refuse(INVALID_TIMESTAMP,
                       "timestamp %lld is out of the accepted range around %lld (message.timestamp.difference.max.ms)",
                       (long long)timestamp, now_ms);
                goto done;
            }
            if (timestamp > max_timestamp)
                max_timestamp = timestamp;
        }
        count += 1;
        position = (Py_ssize_t)end;
    }
    if (!count) {
        refuse(CORRUPT_MESSAGE, "compressed message at offset %lld holds no messages", wrapper_offset);
        goto done;
    }
    result = Py_BuildValue("(LL)", count, (long long)max_timestamp);
done:
    PyBuffer_Release(&view);
    return result;
}

static uint32_t (*crc32c_best)(const unsigned char *, size_t); /* set below, with the CRC-32C loops */

static PyObject *shallow_loop(PyObject *self, PyObject *args)
{
    PyObject *buf;
    long long min_offset, max_message_bytes;
    if (!PyArg_ParseTuple(args, "OLL:shallow_loop", &buf, &min_offset, &max_message_bytes))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t length = view.len;
    PyObject *result = NULL;
    RunningMax ix = {NO_TIMESTAMP, -1, -1};
    int64_t first_offset = -1, previous = min_offset - 1;
    long long count = 0, batches = 0;
    int set_magic = -1;
    Py_ssize_t position = 0;
    while (length - position >= LOG_OVERHEAD) {
        const unsigned char *p = b + position;
        int32_t size = read_int32(p + 8);
        if (size < MIN_MESSAGE_SIZE(0)) {
            refuse(CORRUPT_MESSAGE, "message at byte %zd has impossible size %d", position, size);
            goto done;
        }
        int64_t end = (int64_t)position + LOG_OVERHEAD + size;
        if (end > length)
            break;
        if (end - position > max_message_bytes) {
            refuse(MESSAGE_TOO_LARGE, "message of %lld bytes exceeds max.message.bytes %lld",
                   (long long)(end - position), max_message_bytes);
            goto done;
        }
        int64_t offset = read_int64(p);
        int magic = (int8_t)p[MAGIC_POSITION];
        int64_t timestamp;
        if (magic == BATCH_MAGIC) {
            if (size < MIN_BATCH_SIZE) {
                refuse(CORRUPT_MESSAGE, "record batch at offset %lld has impossible size %d", (long long)offset, size);
                goto done;
            }
            int batch_attributes = (int16_t)((p[BATCH_CRC_START] << 8) | p[BATCH_CRC_START + 1]);
            int32_t last_offset_delta = read_int32(p + BATCH_LAST_OFFSET_DELTA_POSITION);
            if ((batch_attributes & CODEC_MASK) > 4) {
                refuse(CORRUPT_MESSAGE, "record batch at offset %lld has unknown codec %d", (long long)offset,
                       batch_attributes & CODEC_MASK);
                goto done;
            }
            if (crc32c_best(p + BATCH_CRC_START, (size_t)(end - position - BATCH_CRC_START))
                != read_uint32(p + MAGIC_POSITION + 1)) {
                refuse(CORRUPT_MESSAGE, "record batch at offset %lld fails its CRC-32C check", (long long)offset);
                goto done;
            }
            if (offset <= previous || last_offset_delta < 0) {
                refuse(CORRUPT_MESSAGE, "record batch at offset %lld (last offset delta %d) does not follow %lld "
                       "(minimum %lld)", (long long)offset, last_offset_delta, (long long)previous, min_offset);
                goto done;
            }
            if (first_offset < 0)
                first_offset = offset;
            offset += last_offset_delta;
            batches += 1;
            timestamp = read_int64(p + BATCH_MAX_TIMESTAMP_POSITION);
        } else {
            int attributes = (int8_t)p[ATTRIBUTES_POSITION];
            if (magic != 0 && magic != 1) {
                refuse(CORRUPT_MESSAGE, "message at offset %lld has unknown magic %d", (long long)offset, magic);
                goto done;
            }
            if (size < MIN_MESSAGE_SIZE(magic)) {
                refuse(CORRUPT_MESSAGE, "message at offset %lld has impossible size %d", (long long)offset, size);
                goto done;
            }
            if ((attributes & CODEC_MASK) > 3) {
                refuse(CORRUPT_MESSAGE, "message at offset %lld has unknown codec %d", (long long)offset,
                       attributes & CODEC_MASK);
                goto done;
            }
            if (message_crc(b, position, end) != read_uint32(p + CRC_POSITION)) {
                refuse(CORRUPT_MESSAGE, "message at offset %lld fails its CRC check", (long long)offset);
                goto done;
            }
            if (set_magic == -1) {
                set_magic = magic;
            } else if (magic != set_magic) {
                refuse(CORRUPT_MESSAGE, "message set mixes magic %d and magic %d", set_magic, magic);
                goto done;
            }
            if (offset <= previous) {
                refuse(CORRUPT_MESSAGE, "offset %lld does not follow %lld (minimum %lld)", (long long)offset,
                       (long long)previous, min_offset);
                goto done;
            }
            if (first_offset < 0)
                first_offset = offset;
            timestamp = magic ? read_int64(p + TIMESTAMP_POSITION) : NO_TIMESTAMP;
        }
        previous = offset;
        count += 1;
        running_max_add(&ix, offset, timestamp);
        position = (Py_ssize_t)end;
    }
    result = Py_BuildValue("(nLLLLLLL)", position, (long long)first_offset, (long long)(count ? previous : -1),
                           count, (long long)ix.max_timestamp, (long long)ix.offset_of_max_timestamp,
                           (long long)ix.first_untimed, batches);
done:
    PyBuffer_Release(&view);
    return result;
}

/* entries._py_index_entries: the sparse index entries of whole, checked entries appended at
   `base` of a segment (Kafka's LogSegment.append loop). */
static PyObject *index_entries(PyObject *self, PyObject *args)
{
    PyObject *buf, *untimed_times;
    long long base, anchor, interval, max_timestamp, offset_of_max;
    if (!PyArg_ParseTuple(args, "OLLLLLO!:index_entries", &buf, &base, &anchor, &interval, &max_timestamp,
                          &offset_of_max, &PyList_Type, &untimed_times))
        return NULL;
    const Py_ssize_t bounds = PyList_GET_SIZE(untimed_times);
    if (bounds == 0)
        return PyErr_Format(PyExc_ValueError, "index_entries: untimed_times is empty");
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL, *offset_entries = PyList_New(0), *time_entries = PyList_New(0);
    if (offset_entries == NULL || time_entries == NULL)
        goto done;
    const unsigned char *b = view.buf;
    const Py_ssize_t length = view.len;
    /* The untimed bound in use: its offset and time, read again only when it moves on. */
    Py_ssize_t bound = -1;
    long long bound_offset = 0, bound_time = 0;
    Py_ssize_t position = 0;
    while (length - position >= MIN_ENTRY_SIZE) {
        const unsigned char *p = b + position;
        int64_t offset = read_int64(p);
        int64_t timestamp;
        if (p[MAGIC_POSITION] == BATCH_MAGIC) {
            offset += read_int32(p + BATCH_LAST_OFFSET_DELTA_POSITION);
            timestamp = read_int64(p + BATCH_MAX_TIMESTAMP_POSITION);
        } else {
            timestamp = p[MAGIC_POSITION] ? read_int64(p + TIMESTAMP_POSITION) : NO_TIMESTAMP;
        }
        if (timestamp < 0) {
            while (bound < 0 || (bound < bounds - 1 && bound_offset < offset)) {
                bound += 1;
                PyObject *pair = PyList_GET_ITEM(untimed_times, bound);
                if (!PyArg_ParseTuple(pair, "LL:untimed_times", &bound_time, &bound_offset))
                    goto done;
            }
            timestamp = bound_time;
        }
        if (timestamp > max_timestamp) {
            max_timestamp = timestamp;
            offset_of_max = offset;
        }
        if (base + position - anchor > interval) {
            anchor = base + position;
            PyObject *entry = Py_BuildValue("(LL)", (long long)offset, anchor);
            if (entry == NULL)
                goto done;
            int failed = PyList_Append(offset_entries, entry);
            Py_DECREF(entry);
            if (failed)
                goto done;
            entry = Py_BuildValue("(LL)", max_timestamp, offset_of_max);
            if (entry == NULL)
                goto done;
            failed = PyList_Append(time_entries, entry);
            Py_DECREF(entry);
            if (failed)
                goto done;
        }
        position += LOG_OVERHEAD + read_int32(p + 8);
    }
    result = Py_BuildValue("(OOLLL)", offset_entries, time_entries, anchor, max_timestamp, offset_of_max);
done:
    Py_XDECREF(offset_entries);
    Py_XDECREF(time_entries);
    PyBuffer_Release(&view);
    return result;
}

/* ---- Magic 2 record batches (protocol/record_batch.py) ---------------------------------- */

/* CRC-32C (Castagnoli), the checksum of a magic 2 batch. The SSE4.2 crc32 instruction does 8
   bytes per instruction where the CPU has it (checked once, at import); elsewhere, or on other
   architectures, the table loop. */
static CrcTables crc32c_table;

static uint32_t crc32c_portable(const unsigned char *p, size_t n) { return crc_by_tables(crc32c_table, p, n); }

#ifdef HAVE_X86_CRC32C
/* The instruction consumes its operand least significant byte first, which is the byte order
   of the data when a little-endian word is loaded with memcpy (x86 is little-endian). */
#if defined(__x86_64__)
/* One crc32 instruction takes 3 cycles but a new one can start every cycle: three chains over
   three consecutive strides keep it busy, and are joined by shifting a chain's register over
   the STRIDE bytes the next one covered (the register is linear in its input: feeding B after
   A gives shift(A's register, |B|) ^ B's register from 0), a multiplication by x^(8 STRIDE)
   mod P done by four table lookups. About 2.5 times the speed of one chain on a batch. */
#define CRC32C_STRIDE 1024
#define CRC32C_STRIDE_LOG2_BITS 13 /* 8 * 1024 zero bits = 2^13 */
static uint32_t crc32c_stride_shift[4][256];

/* GF(2) 32x32 matrices as 32 columns: what a register bit becomes. */
static uint32_t gf2_times(const uint32_t *matrix, uint32_t vector)
{
    uint32_t sum = 0;
    for (; vector; vector >>= 1, matrix++)
        if (vector & 1)
            sum ^= *matrix;
    return sum;
}

static void make_crc32c_stride_shift(void)
{
    uint32_t op[32], square[32];
    op[0] = 0x82F63B78u; /* one zero bit: bit 0 leaves with the polynomial, the rest shift down */
    for (int i = 1; i < 32; i++)
        op[i] = 1u << (i - 1);
    for (int k = 0; k < CRC32C_STRIDE_LOG2_BITS; k++) {
        for (int i = 0; i < 32; i++)
            square[i] = gf2_times(op, op[i]);
        memcpy(op, square, sizeof op);
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t i = 0; i < 256; i++)
            crc32c_stride_shift[k][i] = gf2_times(op, i << (8 * k));
}

static inline uint32_t crc32c_shift_stride(uint32_t c)
{
    return crc32c_stride_shift[0][c & 0xFF] ^ crc32c_stride_shift[1][(c >> 8) & 0xFF] ^
           crc32c_stride_shift[2][(c >> 16) & 0xFF] ^ crc32c_stride_shift[3][c >> 24];
}
#endif

__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
#if defined(__x86_64__)
    uint64_t c64 = c;
    for (; n >= 3 * CRC32C_STRIDE; p += 3 * CRC32C_STRIDE, n -= 3 * CRC32C_STRIDE) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < CRC32C_STRIDE; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + CRC32C_STRIDE + i, 8);
            memcpy(&w2, p + 2 * CRC32C_STRIDE + i, 8);
            c64 = _mm_crc32_u64(c64, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        c64 = crc32c_shift_stride((uint32_t)c64) ^ (uint32_t)c1;
        c64 = crc32c_shift_stride((uint32_t)c64) ^ (uint32_t)c2;
    }
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c64 = _mm_crc32_u64(c64, word);
    }
    c = (uint32_t)c64;
#endif
    for (; n >= 4; p += 4, n -= 4) {
        uint32_t word;
        memcpy(&word, p, 4);
        c = _mm_crc32_u32(c, word);
    }
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return c ^ 0xFFFFFFFFu;
}
#endif

static uint32_t (*crc32c_best)(const unsigned char *, size_t) = crc32c_portable;

static PyObject *crc32c_function(PyObject *self, PyObject *arg) { return crc_of(arg, crc32c_best); }

static PyObject *crc32c_portable_function(PyObject *self, PyObject *arg) { return crc_of(arg, crc32c_portable); }

/* The raw (not yet zigzag-decoded) base-128 varint of at most max_bytes bytes at *position in
   d[0..end): 0 and *position moved past it, or -1 when it runs past end or is longer. Bits a
   10-byte varint carries beyond the 64th are ORed into *beyond (only the timestamp delta can
   have them, see timestamp_of). */
static inline int read_varint(const unsigned char *d, Py_ssize_t end, Py_ssize_t *position, int max_bytes,
                              uint64_t *raw, uint64_t *beyond)
{
    Py_ssize_t p = *position;
    uint64_t value = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end)
            return -1;
        unsigned char byte = d[p++];
        if (i < 9)
            value |= (uint64_t)(byte & 0x7F) << (7 * i);
        else {
            value |= (uint64_t)(byte & 0x01) << 63;
            *beyond = (uint64_t)(byte & 0x7E) >> 1; /* raw bits 64..69 */
        }
        if (byte < 0x80) {
            *raw = value;
            *position = p;
            return 0;
        }
    }
    return -1;
}

static inline int64_t zigzag(uint64_t raw) { return (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1); }

/* base + the zigzag delta whose raw varint is raw (bits 64..69 in beyond) into *timestamp: 0, or
   -1 when the sum is beyond int64, as Python's unbounded integers would find it. The delta is
   m = raw >> 1 (up to 69 bits) or -(m + 1); it is compared with the room left above or below
   base, which always fits a uint64. */
static inline int timestamp_of(int64_t base, uint64_t raw, uint64_t beyond, int64_t *timestamp)
{
    if (beyond >> 1)
        return -1; /* |delta| >= 2**64: no int64 base brings it back */
    uint64_t m = (raw >> 1) | (beyond << 63);
    if (raw & 1) {
        if (m >= (uint64_t)base - (uint64_t)INT64_MIN)
            return -1;
        *timestamp = (int64_t)((uint64_t)base - m - 1);
    } else {
        if (m > (uint64_t)INT64_MAX - (uint64_t)base)
            return -1;
        *timestamp = (int64_t)((uint64_t)base + m);
    }
    return 0;
}

/* The records section of one batch (decompressed) as magic 1 messages at offsets 0..n-1, and
   their largest timestamp; None when a record does not parse or cannot be converted (the
   Python side then finds which error to report). Same bytes as _py_magic_1_messages. */
static PyObject *magic_1_messages(PyObject *self, PyObject *args)
{
    PyObject *data;
    long long count, base_timestamp, batch_max_timestamp;
    int codec, timestamp_type;
    if (!PyArg_ParseTuple(args, "OLiiLL:magic_1_messages", &data, &count, &codec, &timestamp_type,
                          &base_timestamp, &batch_max_timestamp))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *d = view.buf;
    const Py_ssize_t end = view.len;
    PyObject *out = NULL;
    /* A record takes at least 7 bytes and its message 27 more: the output's bound, checked
       before a forged count can inflate it. A batch has at least one record. */
    if (count < 1 || count > end / 7)
        goto refused;
    const Py_ssize_t capacity = end + 27 * (Py_ssize_t)count;
    if ((out = PyByteArray_FromStringAndSize(NULL, capacity)) == NULL)
        goto failed;
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(out);
    const int log_append_time = timestamp_type == 1;
    const unsigned char attributes = log_append_time && codec == 0 ? TIMESTAMP_TYPE_BIT : 0;
    int64_t timestamp = batch_max_timestamp;
    int64_t max_timestamp = log_append_time ? (timestamp > -1 ? timestamp : -1) : -1;
    Py_ssize_t position = 0, written = 0;
    for (long long index = 0; index < count; index++) {
        uint64_t raw, beyond = 0;
        if (read_varint(d, end, &position, 5, &raw, &beyond) < 0)
            goto refused;
        const int64_t size = zigzag(raw);
        if (size < 0 || position + size > end)
            goto refused;
        const Py_ssize_t record_end = position + (Py_ssize_t)size;
        position += 1; /* attributes */
        if (read_varint(d, end, &position, 10, &raw, &beyond) < 0)
            goto refused;
        if (!log_append_time) {
            if (timestamp_of(base_timestamp, raw, beyond, &timestamp) < 0)
                goto refused;
            if (timestamp > max_timestamp)
                max_timestamp = timestamp;
        }
        /* offsetDelta: magic 1 numbers the messages 0..n-1 whatever it says */
        if (read_varint(d, end, &position, 5, &raw, &beyond) < 0)
            goto refused;
        if (position >= end)
            goto refused;
        int64_t key_length = -1;
        Py_ssize_t key_position = 0;
        if (d[position] == 1) { /* -1: a null key */
            position += 1;
        } else {
            if (read_varint(d, end, &position, 5, &raw, &beyond) < 0)
                goto refused;
            key_length = zigzag(raw);
            if (key_length < 0 || position + key_length > record_end)
                goto refused;
            key_position = position;
            position += (Py_ssize_t)key_length;
        }
        if (read_varint(d, end, &position, 5, &raw, &beyond) < 0)
            goto refused;
        const int64_t value_length = zigzag(raw);
        Py_ssize_t value_end;
        if (value_length < 0) {
            if (value_length != -1)
                goto refused;
            value_end = position;
        } else if (position + value_length > record_end) {
            goto refused;
        } else {
            value_end = position + (Py_ssize_t)value_length;
        }
        /* What is left must be a header count of 0 (one byte, unless a producer pads the
           varint): anything else has headers or does not add up, and is refused either way. */
        if (value_end + 1 != record_end || d[value_end] != 0) {
            Py_ssize_t header_end = value_end;
            if (read_varint(d, end, &header_end, 5, &raw, &beyond) < 0 || raw != 0 || header_end != record_end)
                goto refused;
        }
        const Py_ssize_t key_bytes = key_length > 0 ? (Py_ssize_t)key_length : 0;
        const Py_ssize_t value_bytes = value_end - position;
        const Py_ssize_t message_size = MIN_MESSAGE_SIZE(1) + key_bytes + value_bytes;
        if (written + LOG_OVERHEAD + message_size > capacity)
            goto refused; /* cannot happen (see capacity); kept so no input can overrun */
        unsigned char *w = o + written;
        write_int64(w, index);
        write_uint32(w + 8, (uint32_t)message_size);
        w[MAGIC_POSITION] = 1;
        w[ATTRIBUTES_POSITION] = attributes;
        write_int64(w + TIMESTAMP_POSITION, timestamp);
        write_uint32(w + 26, (uint32_t)(int32_t)key_length);
        memcpy(w + 30, d + key_position, key_bytes);
        write_uint32(w + 30 + key_bytes, (uint32_t)(int32_t)value_length);
        memcpy(w + 34 + key_bytes, d + position, value_bytes);
        write_uint32(w + CRC_POSITION, crc32_ieee(w + MAGIC_POSITION, (size_t)(message_size - 4)));
        written += LOG_OVERHEAD + message_size;
        position = record_end;
    }
    if (position != end)
        goto refused;
    PyBuffer_Release(&view);
    if (PyByteArray_Resize(out, written) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return Py_BuildValue("(NL)", out, (long long)max_timestamp);
refused:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
failed:
    PyBuffer_Release(&view);
    return NULL;
}

/* One record of a records section, as read_record finds it: where it ends, its raw timestamp
   delta, its offsetDelta, where its key and value are and their lengths (-1: null), and its
   header count. */
typedef struct {
    Py_ssize_t end;
    uint64_t timestamp_raw, timestamp_beyond;
    int64_t offset_delta;
    Py_ssize_t key_start, value_start;
    int64_t key_length, value_length;
    int64_t header_count;
} RecordFields;

/* The record at *position of d[0..end) up to its headers, each field within its length: 0 and
   *position at its first header, or -1 when it does not parse as the Python reader
   (record_batch._parse_records) parses it. The key is null only as the one byte of -1, as
   every producer writes it (the Python reader refuses other forms as a negative length); the
   value is null as -1 in any form. A record takes at least 7 bytes. */
static inline int read_record(const unsigned char *d, Py_ssize_t end, Py_ssize_t *position, RecordFields *f)
{
    uint64_t raw, beyond = 0;
    if (read_varint(d, end, position, 5, &raw, &beyond) < 0)
        return -1;
    const int64_t size = zigzag(raw);
    if (size < 0 || *position + size > end)
        return -1;
    f->end = *position + (Py_ssize_t)size;
    *position += 1; /* attributes */
    f->timestamp_beyond = 0;
    if (read_varint(d, f->end, position, 10, &f->timestamp_raw, &f->timestamp_beyond) < 0
        || read_varint(d, f->end, position, 5, &raw, &beyond) < 0)
        return -1;
    f->offset_delta = zigzag(raw);
    for (int field = 0; field < 2; field++) {
        int64_t *length = field ? &f->value_length : &f->key_length;
        if (field == 0 && *position < f->end && d[*position] == 1) {
            *position += 1;
            *length = -1;
            continue;
        }
        if (read_varint(d, f->end, position, 5, &raw, &beyond) < 0)
            return -1;
        *length = zigzag(raw);
        if (*length < -field || *position + (*length > 0 ? *length : 0) > f->end)
            return -1;
        *(field ? &f->value_start : &f->key_start) = *position;
        if (*length > 0)
            *position += (Py_ssize_t)*length;
    }
    if (read_varint(d, f->end, position, 5, &raw, &beyond) < 0)
        return -1;
    f->header_count = zigzag(raw);
    return f->header_count < 0 || f->header_count * 2 > f->end - *position ? -1 : 0;
}

/* The header at *position of a record ending at record_end: its UTF-8 key (a new str), the
   start and length (-1: null) of its value, *position past it; NULL when it does not parse
   (no Python error set). */
static PyObject *read_header(const unsigned char *d, Py_ssize_t record_end, Py_ssize_t *position,
                             Py_ssize_t *value_start, int64_t *value_length)
{
    uint64_t raw, beyond = 0;
    if (read_varint(d, record_end, position, 5, &raw, &beyond) < 0)
        return NULL;
    const int64_t key_length = zigzag(raw);
    if (key_length < 0 || *position + key_length > record_end)
        return NULL;
    const Py_ssize_t key_start = *position;
    *position += (Py_ssize_t)key_length;
    if (read_varint(d, record_end, position, 5, &raw, &beyond) < 0)
        return NULL;
    *value_length = zigzag(raw);
    if (*value_length < -1 || *position + (*value_length > 0 ? *value_length : 0) > record_end)
        return NULL;
    *value_start = *position;
    if (*value_length > 0)
        *position += (Py_ssize_t)*value_length;
    PyObject *key = PyUnicode_DecodeUTF8((const char *)d + key_start, (Py_ssize_t)key_length, NULL);
    if (key == NULL)
        PyErr_Clear();
    return key;
}

static inline int varint_size(uint64_t raw)
{
    int n = 1;
    while (raw >= 0x80) {
        raw >>= 7;
        n++;
    }
    return n;
}

static inline Py_ssize_t write_varint(unsigned char *o, uint64_t raw)
{
    Py_ssize_t n = 0;
    while (raw >= 0x80) {
        o[n++] = (unsigned char)(raw & 0x7F) | 0x80;
        raw >>= 7;
    }
    o[n++] = (unsigned char)raw;
    return n;
}

static inline uint64_t zigzag_encode(int64_t v) { return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63); }

/* The records section (uncompressed) of the one batch a set of whole, checked, uncompressed
   magic 0/1 messages becomes: offset deltas 0..n-1, no headers, each message's timestamp (-1
   for magic 0) or append_time when that is not -1. Returns (section, count, base timestamp, max
   timestamp), or None for a compressed message (a wrapper: its inner set is converted instead)
   or one whose lengths do not add up. Same bytes as records._py_magic_2_records.
   With max_message_bytes, earliest and latest, the set as a producer sent it is also checked as
   assign_loop checks it for a log of magic 1 (one magic, entry sizes, CRCs, no LogAppendTime
   bit from the producer, CreateTime timestamps within [earliest, latest]): None where it would
   raise. An up-conversion then walks the messages once instead of assigning offsets in a copy
   and walking that again. */
static PyObject *magic_2_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long append_time, max_message_bytes = -1, earliest = 0, latest = 0;
    if (!PyArg_ParseTuple(args, "y*L|LLL:magic_2_records", &view, &append_time, &max_message_bytes, &earliest,
                          &latest))
        return NULL;
    const int checked = max_message_bytes >= 0;
    const unsigned char *b = view.buf;
    const Py_ssize_t end = view.len;
    /* A message takes at least 26 bytes and its record at most 32 more than its key and value,
       which the message holds with 26 bytes besides: 6 bytes more per message at most. */
    const Py_ssize_t capacity = end + 6 * (end / MIN_ENTRY_SIZE) + 16;
    PyObject *out = PyByteArray_FromStringAndSize(NULL, capacity);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(out);
    Py_ssize_t position = 0, written = 0;
    long long count = 0;
    int64_t base_timestamp = NO_TIMESTAMP, max_timestamp = NO_TIMESTAMP;
    while (position < end) {
        if (end - position < MIN_ENTRY_SIZE)
            goto refused;
        const int magic = b[position + MAGIC_POSITION];
        if (magic > 1 || end - position < LOG_OVERHEAD + MIN_MESSAGE_SIZE(magic))
            goto refused;
        Head h;
        read_head(b, position, magic, &h);
        if (h.size < MIN_MESSAGE_SIZE(magic) || h.end > end || (h.attributes & CODEC_MASK) ||
            lengths_check(b, position, magic, &h))
            goto refused;
        if (checked && (magic != b[MAGIC_POSITION] || h.size > max_message_bytes - LOG_OVERHEAD
                        || message_crc(b, position, (Py_ssize_t)h.end) != h.crc
                        || (magic && (h.attributes & TIMESTAMP_TYPE_BIT))
                        || (magic && append_time == NO_TIMESTAMP && h.timestamp != NO_TIMESTAMP
                            && (h.timestamp < earliest || h.timestamp > latest))))
            goto refused;
        const int64_t timestamp = append_time != NO_TIMESTAMP ? append_time : h.timestamp;
        if (count == 0)
            base_timestamp = timestamp;
        if (timestamp > max_timestamp)
            max_timestamp = timestamp;
        const Py_ssize_t key_bytes = h.key_length > 0 ? h.key_length : 0;
        const Py_ssize_t value_bytes = h.value_length > 0 ? h.value_length : 0;
        const Py_ssize_t key_position = position + HEAD_SIZE(magic) - 4; /* after the key length */
        const Py_ssize_t value_position = key_position + key_bytes + 4;
        const uint64_t timestamp_delta = zigzag_encode((int64_t)((uint64_t)timestamp - (uint64_t)base_timestamp));
        const uint64_t offset_delta = zigzag_encode(count);
        const uint64_t key_length = zigzag_encode(h.key_length), value_length = zigzag_encode(h.value_length);
        const Py_ssize_t body = 1 + varint_size(timestamp_delta) + varint_size(offset_delta) + varint_size(key_length)
                                + key_bytes + varint_size(value_length) + value_bytes + 1;
        if (written + 5 + body > capacity)
            goto refused; /* cannot happen (see capacity); kept so no input can overrun */
        written += write_varint(o + written, zigzag_encode(body));
        o[written++] = 0; /* attributes */
        written += write_varint(o + written, timestamp_delta);
        written += write_varint(o + written, offset_delta);
        written += write_varint(o + written, key_length);
        memcpy(o + written, b + key_position, key_bytes);
        written += key_bytes;
        written += write_varint(o + written, value_length);
        memcpy(o + written, b + value_position, value_bytes);
        written += value_bytes;
        o[written++] = 0; /* no headers */
        count++;
        position = (Py_ssize_t)h.end;
    }
    PyBuffer_Release(&view);
    if (count == 0 || PyByteArray_Resize(out, written) < 0) {
        Py_DECREF(out);
        if (count == 0)
            Py_RETURN_NONE;
        return NULL;
    }
    return Py_BuildValue("(NLLL)", out, count, (long long)base_timestamp, (long long)max_timestamp);
refused:
    Py_DECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

/* record_batch._records_max_timestamp: the records section of one batch (decompressed) checked as
   Kafka's LogValidator checks a magic 2 batch's records: each whole and within its length,
   offsetDelta equal to its index, its timestamp within int64 and (when check_timestamps) -1 or
   within [earliest, latest], lengths and headers that add up (header keys UTF-8). Returns the
   largest timestamp (-1 for none), or None when any record fails (the Python side then finds
   which error to report). */
static PyObject *check_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, base_timestamp, earliest, latest;
    int check_timestamps;
    if (!PyArg_ParseTuple(args, "y*LLpLL:check_records", &view, &count, &base_timestamp, &check_timestamps,
                          &earliest, &latest))
        return NULL;
    const unsigned char *d = view.buf;
    const Py_ssize_t end = view.len;
    PyObject *result = NULL;
    int64_t max_timestamp = -1;
    Py_ssize_t position = 0;
    /* A record takes at least 7 bytes: a forged count is refused before the loop. */
    if (count < 1 || count > end / 7)
        goto refused;
    for (long long index = 0; index < count; index++) {
        RecordFields f;
        int64_t timestamp;
        if (read_record(d, end, &position, &f) < 0 || f.offset_delta != index
            || timestamp_of(base_timestamp, f.timestamp_raw, f.timestamp_beyond, &timestamp) < 0)
            goto refused;
        if (check_timestamps && timestamp != -1 && (timestamp < earliest || timestamp > latest))
            goto refused;
        if (timestamp > max_timestamp)
            max_timestamp = timestamp;
        for (int64_t header = 0; header < f.header_count; header++) {
            Py_ssize_t value_start;
            int64_t value_length;
            PyObject *key = read_header(d, f.end, &position, &value_start, &value_length);
            if (key == NULL)
                goto refused;
            Py_DECREF(key);
        }
        if (position != f.end)
            goto refused;
    }
    if (position != end)
        goto refused;
    result = PyLong_FromLongLong(max_timestamp);
    goto done;
refused:
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

/* base + delta as a Python int, which int64 may not hold (base is any baseOffset, delta a
   35-bit offsetDelta): the Python reader's unbounded sum. */
static PyObject *offset_of(int64_t base, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(base), *b = PyLong_FromLongLong(delta), *result = NULL;
    if (a != NULL && b != NULL)
        result = PyNumber_Add(a, b);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return result;
}

/* A key or value of length bytes at d + position (None for -1). */
static inline PyObject *bytes_or_none(const unsigned char *d, Py_ssize_t position, int64_t length)
{
    return length < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)d + position, (Py_ssize_t)length);
}

/* The records of one batch's records section (decompressed) as instances of record_class (the
   BatchRecord tuple: offset, timestamp, timestamp type, key, value, headers), as
   record_batch._py_batch_records reads them; None when it would refuse the section (it then
   runs, to say why). Consumers' readers and the log cleaner parse stored batches here. */
static PyObject *batch_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, base_offset, base_timestamp, max_timestamp;
    int timestamp_type;
    PyTypeObject *record_class;
    if (!PyArg_ParseTuple(args, "y*LLLiLO!:batch_records", &view, &count, &base_offset, &base_timestamp,
                          &timestamp_type, &max_timestamp, &PyType_Type, &record_class))
        return NULL;
    const unsigned char *d = view.buf;
    const Py_ssize_t end = view.len;
    PyObject *list = NULL, *type_object = NULL;
    Py_ssize_t position = 0;
    /* A forged count is refused before the list is made (a batch the cleaner emptied has 0). */
    if (count < 0 || count > end / 7)
        goto refused;
    if ((list = PyList_New((Py_ssize_t)count)) == NULL || (type_object = PyLong_FromLong(timestamp_type)) == NULL)
        goto failed;
    for (long long index = 0; index < count; index++) {
        RecordFields f;
        int64_t timestamp = max_timestamp; /* LogAppendTime: every record's */
        if (read_record(d, end, &position, &f) < 0
            || (timestamp_type == 0 && timestamp_of(base_timestamp, f.timestamp_raw, f.timestamp_beyond, &timestamp) < 0))
            goto refused;
        PyObject *headers = PyTuple_New((Py_ssize_t)f.header_count);
        if (headers == NULL)
            goto failed;
        for (int64_t header = 0; header < f.header_count; header++) {
            Py_ssize_t value_start;
            int64_t value_length;
            PyObject *key = read_header(d, f.end, &position, &value_start, &value_length);
            if (key == NULL) {
                Py_DECREF(headers);
                goto refused;
            }
            PyObject *pair = Py_BuildValue("(NN)", key, bytes_or_none(d, value_start, value_length));
            if (pair == NULL) {
                Py_DECREF(headers);
                goto failed;
            }
            PyTuple_SET_ITEM(headers, (Py_ssize_t)header, pair);
        }
        if (position != f.end) {
            Py_DECREF(headers);
            goto refused;
        }
        /* A BatchRecord: a tuple subclass without a dict, filled as tuple.__new__ would. */
        PyObject *record = record_class->tp_alloc(record_class, 6);
        if (record == NULL) {
            Py_DECREF(headers);
            goto failed;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)index, record);
        PyTuple_SET_ITEM(record, 0, offset_of(base_offset, f.offset_delta));
        PyTuple_SET_ITEM(record, 1, PyLong_FromLongLong(timestamp));
        PyTuple_SET_ITEM(record, 2, Py_NewRef(type_object));
        PyTuple_SET_ITEM(record, 3, bytes_or_none(d, f.key_start, f.key_length));
        PyTuple_SET_ITEM(record, 4, bytes_or_none(d, f.value_start, f.value_length));
        PyTuple_SET_ITEM(record, 5, headers);
        if (PyTuple_GET_ITEM(record, 0) == NULL || PyTuple_GET_ITEM(record, 1) == NULL
            || PyTuple_GET_ITEM(record, 3) == NULL || PyTuple_GET_ITEM(record, 4) == NULL)
            goto failed;
    }
    if (position != end)
        goto refused;
    Py_DECREF(type_object);
    PyBuffer_Release(&view);
    return list;
refused:
    Py_XDECREF(list);
    Py_XDECREF(type_object);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(list);
    Py_XDECREF(type_object);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"crc32", crc32_function, METH_O, "CRC-32 of a bytes-like object, as zlib.crc32 (the loops' own)."},
    {"crc32_portable", crc32_portable_function, METH_O, "CRC-32 without PCLMULQDQ folding (for the tests)."},
    {"assign_loop", assign_loop, METH_VARARGS, "validate_and_assign's per-message loop (see _py_assign_loop)."},
    {"scan_inner", scan_inner, METH_VARARGS, "Check a decompressed inner set (see _py_scan_inner)."},
    {"shallow_loop", shallow_loop, METH_VARARGS, "validate_given_offsets' loop (see _py_shallow_loop)."},
    {"index_entries", index_entries, METH_VARARGS, "A segment's index entries for an append (see entries._py_index_entries)."},
    {"magic_1_messages", magic_1_messages, METH_VARARGS,
     "A magic 2 records section as magic 1 messages (see record_batch._py_magic_1_messages)."},
    {"magic_2_records", magic_2_records, METH_VARARGS,
     "The records section magic 0/1 messages become in a batch (see records._py_magic_2_records)."},
    {"check_records", check_records, METH_VARARGS,
     "A magic 2 batch's records checked, their largest timestamp (see record_batch._records_max_timestamp)."},
    {"batch_records", batch_records, METH_VARARGS,
     "A magic 2 batch's records as BatchRecord tuples (see record_batch._py_batch_records)."},
    {"crc32c", crc32c_function, METH_O, "CRC-32C of a bytes-like object (SSE4.2 where the CPU has it)."},
    {"crc32c_portable", crc32c_portable_function, METH_O, "CRC-32C by the table loop only (for the tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "minikafka.protocol._records",
                                    "C loops of minikafka.protocol.records (optional accelerator).", -1, methods};

PyMODINIT_FUNC PyInit__records(void)
{
    PyObject *errors = PyImport_ImportModule("minikafka.protocol.errors");
    if (errors == NULL)
        return NULL;
    PyObject *codes = PyObject_GetAttrString(errors, "ErrorCode");
    RecordError = PyObject_GetAttrString(errors, "RecordError");
    Py_DECREF(errors);
    if (codes == NULL || RecordError == NULL) {
        Py_XDECREF(codes);
        return NULL;
    }
    CORRUPT_MESSAGE = PyObject_GetAttrString(codes, "CORRUPT_MESSAGE");
    MESSAGE_TOO_LARGE = PyObject_GetAttrString(codes, "MESSAGE_TOO_LARGE");
    INVALID_TIMESTAMP = PyObject_GetAttrString(codes, "INVALID_TIMESTAMP");
    Py_DECREF(codes);
    if (CORRUPT_MESSAGE == NULL || MESSAGE_TOO_LARGE == NULL || INVALID_TIMESTAMP == NULL)
        return NULL;
    make_crc_tables(crc_table, 0xEDB88320u);
    make_crc_tables(crc32c_table, 0x82F63B78u);
    int hardware_crc32c = 0;
#ifdef HAVE_X86_CRC32C
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        crc32c_best = crc32c_sse42;
        hardware_crc32c = 1;
    }
    crc32_ieee_folds = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#if defined(__x86_64__)
    make_crc32c_stride_shift();
#endif
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "CRC32C_HARDWARE", hardware_crc32c) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
