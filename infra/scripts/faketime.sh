#!/usr/bin/env bash
# Prints the path of libfaketime's preload library, installing Debian's
# libfaketime first where it is missing (test.sh runs the time-sensitive
# suites again with the process clock moved ahead: docs/testing.md).
set -euo pipefail
find_lib() { dpkg -L libfaketime 2>/dev/null | grep -m1 '/libfaketime\.so\.1$' || true; }
lib="$(find_lib)"
if [ -z "$lib" ]; then
  echo "Installing libfaketime (Debian) ..." >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq libfaketime >&2
  lib="$(find_lib)"
fi
[ -n "$lib" ] || { echo "libfaketime's library was not found after its install" >&2; exit 1; }
echo "$lib"
