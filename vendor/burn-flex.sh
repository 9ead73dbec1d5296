#!/usr/bin/env bash
# vendor/burn-flex = pristine burn-flex (crates.io) + vendor/burn-flex.patch, minus a few
# files the vendored copy leaves out, plus PATCHED.md. See vendor/burn-flex/PATCHED.md.
#
#   vendor/burn-flex.sh [check]   verify that vendor/burn-flex is exactly that (default)
#   vendor/burn-flex.sh derive    rebuild vendor/burn-flex from pristine + patch
#
# The pristine crate is taken from cargo's registry (${CARGO_HOME:-~/.cargo}/registry/src/*/);
# if it is not there, it is fetched with `cargo fetch` in a throwaway project.
# Overrides (mainly for testing): BURN_FLEX_DIR (the vendored tree), BURN_FLEX_PATCH.
set -euo pipefail

VERSION=0.22.1
CRATE=burn-flex

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
vendor_dir=${BURN_FLEX_DIR:-$script_dir/$CRATE}
patch_file=${BURN_FLEX_PATCH:-$script_dir/$CRATE.patch}

# Files of the published crate that the vendored copy deliberately leaves out
# (cargo's unpack marker, VCS info, the crate's own long docs, its lock file).
OMITTED=(
    .cargo-ok
    .cargo_vcs_info.json
    ACKNOWLEDGMENTS.md
    BENCHMARKS.md
    COMPARISON.md
    Cargo.lock
)
# Files the vendored copy adds.
ADDED=(
    PATCHED.md
)

die() { echo "burn-flex.sh: $*" >&2; exit 2; }

mode=${1:-check}
case $mode in
    check | derive) ;;
    -h | --help) sed -n '2,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown mode '$mode' (expected: check | derive)" ;;
esac
[ $# -le 1 ] || die "too many arguments"
for tool in cargo diff patch; do
    command -v "$tool" >/dev/null || die "'$tool' not found"
done
[ -f "$patch_file" ] || die "patch not found: $patch_file"

work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT

find_pristine() {
    local d
    for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$CRATE-$VERSION"; do
        if [ -f "$d/Cargo.toml" ] && [ -f "$d/.cargo-ok" ]; then
            printf '%s\n' "$d"
            return 0
        fi
    done
    return 1
}

fetch_pristine() {
    local proj=$work/fetch
    mkdir -p "$proj/src"
    : >"$proj/src/lib.rs"
    cat >"$proj/Cargo.toml" <<EOF
[package]
name = "burn-flex-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$CRATE = "=$VERSION"

[workspace]
EOF
    echo "burn-flex.sh: fetching $CRATE $VERSION with cargo fetch" >&2
    (cd "$proj" && cargo fetch --quiet) || die "cargo fetch of $CRATE $VERSION failed"
}

pristine=$(find_pristine) || { fetch_pristine; pristine=$(find_pristine) || die "$CRATE-$VERSION not in the cargo registry after cargo fetch"; }

# expected = pristine - OMITTED + patch
expected=$work/expected
cp -R -- "$pristine" "$expected"
for f in "${OMITTED[@]}"; do rm -rf -- "${expected:?}/$f"; done
if ! (cd "$expected" && patch -p1 --batch --forward --fuzz=0 --no-backup-if-mismatch --quiet <"$patch_file"); then
    die "$patch_file does not apply cleanly to $CRATE $VERSION ($pristine)"
fi

if [ "$mode" = derive ]; then
    [ -d "$vendor_dir" ] || mkdir -p -- "$vendor_dir"
    for f in "${ADDED[@]}"; do
        if [ -e "$vendor_dir/$f" ]; then cp -R -- "$vendor_dir/$f" "$expected/$f"; else echo "burn-flex.sh: warning: $vendor_dir/$f missing" >&2; fi
    done
    # Replace the contents, keep the directory itself.
    find "$vendor_dir" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
    cp -R -- "$expected"/. "$vendor_dir"/
    echo "vendor/$CRATE re-derived from $CRATE $VERSION + vendor/$CRATE.patch"
    exit 0
fi

# check: compare with the vendored tree minus ADDED.
[ -d "$vendor_dir" ] || die "vendored tree not found: $vendor_dir"
actual=$work/vendor-$CRATE
cp -R -- "$vendor_dir" "$actual"
for f in "${ADDED[@]}"; do rm -rf -- "${actual:?}/$f"; done
rc=0
(cd "$work" && diff -ruN "expected" "vendor-$CRATE" >"$work/diff") || rc=$?
if [ "$rc" -eq 0 ]; then
    echo "vendor/$CRATE = $CRATE $VERSION + vendor/$CRATE.patch"
    exit 0
fi
[ "$rc" -eq 1 ] || die "diff failed (exit $rc)"
echo "vendor/$CRATE differs from $CRATE $VERSION + vendor/$CRATE.patch (expected = pristine + patch):" >&2
cat "$work/diff"
exit 1
