# Linux arm64 cross build on a Debian amd64 machine (the arm64 preset; scripts/arm64.sh installs
# what it needs and runs it; docs/portability.md). Compilers: crossbuild-essential-arm64. Libraries:
# Debian's multiarch :arm64 packages, which live in /usr/lib/aarch64-linux-gnu beside the amd64
# ones (headers shared in /usr/include, arch-specific ones in /usr/include/aarch64-linux-gnu).
# Test binaries run through qemu-user (CMAKE_CROSSCOMPILING_EMULATOR: ctest and
# gtest_discover_tests prefix it); the processes the tests spawn (the vkllm binary) run through
# the kernel's binfmt_misc entry that qemu-user-binfmt registers.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(triple aarch64-linux-gnu)

set(CMAKE_C_COMPILER ${triple}-gcc)
set(CMAKE_CXX_COMPILER ${triple}-g++)
# Multiarch: find_library and find_package look in <prefix>/lib/aarch64-linux-gnu first, and
# never in the amd64 directory /usr/lib/x86_64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE ${triple})

# The roots: the cross toolchain's own sysroot (libc6-dev-arm64-cross) and / (the :arm64
# packages). Libraries, headers and CMake packages come only from these roots, re-rooted through
# the multiarch directory above; programs (glslc, python3, the shells the tests start) are the
# build machine's own.
set(CMAKE_FIND_ROOT_PATH /usr/${triple} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config (PCRE2, utf8proc, cpp-httplib, and what FindCURL asks): only the arm64 .pc files and
# the architecture-independent ones.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${triple}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# -L /: the arm64 dynamic loader and libraries are the multiarch ones under / (libc6:arm64).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
