#!/usr/bin/env bash
# Install what trident's build and tests need on Debian (run as root). Only what is
# missing is installed, so running it twice is cheap.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libinih-dev libcmocka-dev libdnnl-dev libcjson-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
