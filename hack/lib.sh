# Shell helpers shared by the hack/ scripts: source it after defining log().
# shellcheck shell=bash

as_root() { if ((EUID == 0)); then "$@"; else sudo "$@"; fi; }

ensure_packages() {  # install the Debian packages that are not installed yet, if any
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null | grep -q '^ii' || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  log "installing Debian packages: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
}

debian_archive() {  # "URI<TAB>SIGNED-BY" of the system's `deb` entry for $SUITE main
  shopt -s nullglob
  local sources=(/etc/apt/sources.list.d/*.sources) lists=(/etc/apt/sources.list.d/*.list)
  [[ -f /etc/apt/sources.list ]] && lists+=(/etc/apt/sources.list)
  {
    ((${#sources[@]} == 0)) || awk -v suite="$SUITE" '
      function has(list, word) { return (" " list " ") ~ (" " word " ") }
      function flush() {
        if (has(f["types"], "deb") && has(f["suites"], suite) && has(f["components"], "main") \
            && tolower(f["enabled"]) != "no") {
          split(f["uris"], uri, " "); print uri[1] "\t" f["signed-by"]
        }
        delete f
      }
      FNR == 1 { flush() }  # a file may end without a blank line
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[A-Za-z-]+:/ {
        key = tolower(substr($0, 1, index($0, ":") - 1))
        val = substr($0, index($0, ":") + 1); gsub(/^[ \t]+|[ \t]+$/, "", val); f[key] = val
      }
      END { flush() }' "${sources[@]}"
    ((${#lists[@]} == 0)) || awk -v suite="$SUITE" '
      $1 != "deb" { next }
      {
        signed = ""; i = 2
        if ($2 ~ /^\[/) {  # [opt=value ...] may span several fields
          for (; i <= NF; i++) {
            if ($i ~ /^\[?signed-by=/) { signed = $i; sub(/^\[?signed-by=/, "", signed); sub(/\]$/, "", signed) }
            if ($i ~ /\]$/) { i++; break }
          }
        }
        if ($(i + 1) != suite) next
        for (c = i + 2; c <= NF; c++) if ($c == "main") { print $i "\t" signed; next }
      }' "${lists[@]}"
  } | head -n 1
}
