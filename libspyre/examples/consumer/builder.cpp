// The installed header-only program builder: builds and runs a null program.
#include <spyre/spyre.h>

#include <cstdio>
#include <spyre/program_builder.hpp>

int main() {
    spyre::ProgramBuilder b;
    b.halt();
    auto img = b.finish();
    spyre_device_t dev;
    spyre_program_t p;
    spyre_launch_params lp{};
    lp.num_cores = 1;
    if (spyre_device_open(0, &dev) || spyre_program_load(dev, img.data(), img.size(), &p) ||
        spyre_launch(p, &lp, nullptr)) {
        std::fprintf(stderr, "builder: %s\n", spyre_last_error());
        return 1;
    }
    std::printf("null program ran\n");
    spyre_program_free(p);
    spyre_device_close(dev);
    return 0;
}
