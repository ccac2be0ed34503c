# Sourced by scripts/sanitize.sh and scripts/fuzz.sh: configures the build
# tree of one sanitizer, with clang, and sets $build to it.
#
#   sanitizer_tree address   AddressSanitizer + UndefinedBehaviorSanitizer,
#                            build-asan/; also compiled for libFuzzer
#                            (-fsanitize=fuzzer-no-link) with the harnesses
#                            of tests/fuzz configured, so that the fuzz
#                            harnesses link this tree's libraries instead of
#                            compiling them a second time
#   sanitizer_tree thread    ThreadSanitizer, build-tsan/
#
# -O1 keeps the sanitizers' stack traces whole and builds fast; line tables
# (-g1) are all a report's file:line needs. ops/ is compiled at -O0
# (FERRY_UNOPTIMIZED_TOOLS), which builds faster still.
sanitizer_tree() {
  local flags link fuzz=OFF
  case "$1" in
    address)
      build=build-asan
      flags="-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
      link="-fsanitize=address,undefined"
      fuzz=ON
      ;;
    thread)
      build=build-tsan
      flags="-fsanitize=thread"
      link="-fsanitize=thread"
      ;;
    *)
      echo "sanitizer_tree: no sanitizer '$1' (address or thread)" >&2
      return 2
      ;;
  esac
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
    -DCMAKE_EXE_LINKER_FLAGS="$link" -DCMAKE_SHARED_LINKER_FLAGS="$link" -DFERRY_FUZZ=$fuzz -DFERRY_UNOPTIMIZED_TOOLS=ON \
    -DCMAKE_CUDA_COMPILER=NOTFOUND -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
}
