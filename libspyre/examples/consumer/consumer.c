/* An out-of-tree libspyre consumer, built against an installed libspyre through pkg-config
 * (Makefile) or CMake (CMakeLists.txt). Round trip through an async copy on a stream. */
#include <spyre/spyre.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    if (spyre_get_version() >> 16 != SPYRE_API_VERSION_MAJOR) {
        fprintf(stderr, "libspyre major version mismatch\n");
        return 1;
    }
    spyre_device_t dev;
    spyre_stream_t s;
    spyre_buffer_t buf;
    char in[64] = "hello from an out-of-tree consumer", out[64] = {0};
    if (spyre_device_open(0, &dev) || spyre_stream_create(dev, 0, &s) ||
        spyre_malloc(dev, sizeof in, &buf) ||
        spyre_memcpy_htod_async(buf, 0, in, sizeof in, s) ||
        spyre_memcpy_dtoh_async(out, buf, 0, sizeof out, s) || spyre_stream_synchronize(s)) {
        fprintf(stderr, "consumer: %s\n", spyre_last_error());
        return 1;
    }
    printf("libspyre %s: %s\n", spyre_get_version_string(), out);
    spyre_free(buf);
    spyre_stream_destroy(s);
    spyre_device_close(dev);
    return strcmp(in, out) != 0;
}
