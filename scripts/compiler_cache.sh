# Sourced by scripts/build.sh and scripts/test.sh: compiles through ccache
# where it is installed, so the three build trees of a test run (plain,
# ASan, TSan) and a later run of the same sources in another clone
# reuse what was compiled before. CMake reads the launcher variables when it
# first configures a tree. Paths are hashed relative to the source root, so
# two clones of one commit share the cache.
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
fi
