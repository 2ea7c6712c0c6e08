#!/usr/bin/env bash
# Build the streamjob image (the Dockerfile, unchanged) with buildah, on a machine that reaches no
# container registry: the Dockerfile's base image is made here with Debian's debootstrap and
# stored under the very name its FROM uses, so `--pull=never` finds it.
#
#   docker/build-image.sh                  build streamjob:<version> unless it is up to date
#   docker/build-image.sh --force          build even when it is (buildah's layer cache still applies)
#   docker/build-image.sh --print-tag      print the image name and exit
#   docker/build-image.sh --print-hash     print the source hash the image is labelled with and exit
#   docker/build-image.sh --print-inputs   print the files that hash covers and exit
#
# Idempotent: the base image is made once and kept; the image carries a label with a hash of
# every file that goes into it (IMAGE_INPUTS below) and is rebuilt only when that hash differs.
# Needs root (debootstrap, and buildah with the vfs driver), buildah and, for the base image only,
# debootstrap (Debian: apt-get install buildah debootstrap).
#
# Environment: MIRROR (default http://deb.debian.org/debian),
#              SECURITY_MIRROR (default http://deb.debian.org/debian-security).
set -euo pipefail

cd "$(dirname "$0")/.."

# vfs and chroot work everywhere, including inside an unprivileged container or a VM without
# overlayfs/fuse support; every buildah call must use the same driver or it sees another store.
BUILDAH=(buildah --storage-driver vfs)
ISOLATION=(--isolation chroot)
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}
HASH_LABEL=io.streamjob.source-hash
# Everything the Dockerfile copies (its build context, see .dockerignore) and the build's own
# recipe: a change to any of these makes the image stale.
IMAGE_INPUTS=(Dockerfile .dockerignore docker/build-image.sh docker/entrypoint.sh pyproject.toml README.md
              runtime operator state_processor examples/*.py e2e/jobs/*.py)

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build-image.sh: %s\n' "$*" >&2; exit 1; }

force=0
print=
while [ $# -gt 0 ]; do
    case "$1" in
        --force) force=1 ;;
        --print-tag|--print-hash|--print-inputs) print=${1#--print-} ;;
        -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' pyproject.toml | head -n 1)
[ -n "$version" ] || die "no version = \"...\" in pyproject.toml"
tag="streamjob:$version"

input_files() {
    # The files themselves, sorted bytewise so the hash does not depend on the locale; bytecode
    # and egg-info are excluded here as in .dockerignore.
    find "${IMAGE_INPUTS[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' -print0 \
        | LC_ALL=C sort -z
}

source_hash() {
    # Path, mode (the entrypoint's executable bit) and content of every input.
    { input_files | xargs -0 stat -c '%a %n'; input_files | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1
}

case "$print" in
    tag) echo "$tag"; exit 0 ;;
    hash) source_hash; exit 0 ;;
    inputs) input_files | tr '\0' '\n'; exit 0 ;;
esac

command -v buildah >/dev/null 2>&1 || die "buildah not found (Debian: apt-get install buildah)"
[ "$(id -u)" = 0 ] || die "run as root: debootstrap and buildah's vfs storage need it"

# One build at a time on this machine: two would both make the base image or race on the tag.
lock=${TMPDIR:-/tmp}/streamjob-build-image.lock
exec 9>"$lock"
if ! flock -n 9; then
    say "waiting for another build-image.sh (lock $lock)"
    flock 9
fi

# -- the base image -----------------------------------------------------------------------------------
# The first FROM that names an image (later ones name stages). buildah resolves the short name
# "debian" through the shortnames alias to docker.io/library/debian, and so does Docker.
from=$(awk 'toupper($1) == "FROM" { for (i = 2; i <= NF; i++) if ($i !~ /^--/) { print $i; exit } }' Dockerfile)
case "$from" in
    debian:*-slim) suite=${from#debian:}; suite=${suite%-slim} ;;
    *) die "the Dockerfile's base image is $from; this script can only make debian:<suite>-slim" ;;
esac
base="docker.io/library/$from"

make_base() {
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (Debian: apt-get install debootstrap)"
    local ctr mnt
    ctr=$("${BUILDAH[@]}" from --name "streamjob-base-$$" scratch)
    # shellcheck disable=SC2064  # expand now: the container's name is known
    trap "${BUILDAH[*]} rm $ctr >/dev/null 2>&1 || true" EXIT
    mnt=$("${BUILDAH[@]}" mount "$ctr")
    say "debootstrap --variant=minbase $suite from $MIRROR (about half a minute)"
    # Its milestones and any warning or error; the whole log stays in $mnt/debootstrap on failure.
    if ! debootstrap --variant=minbase "$suite" "$mnt" "$MIRROR" 2>&1 \
            | awk '/^I: (Retrieving Release|Validating Packages|Installing core|Unpacking the base|Configuring the base|Base system)|^[EW]:/ { print; fflush() }' >&2; then
        die "debootstrap $suite from $MIRROR failed (see the messages above)"
    fi

    # What makes the official image "slim": dpkg leaves out documentation, man pages and
    # translations, now (deleted below) and in every later apt-get install.
    cat >"$mnt/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
EOF
    find "$mnt/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
    find "$mnt/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$mnt"/usr/share/man/* "$mnt"/usr/share/info/* "$mnt"/usr/share/locale/*
    # apt as in container images: no translations, no cached .debs.
    cat >"$mnt/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    echo 'Acquire::Languages "none";' >"$mnt/etc/apt/apt.conf.d/docker-no-languages"
    # The suite with its updates and security fixes, as in the official image.
    rm -f "$mnt/etc/apt/sources.list"
    cat >"$mnt/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # debootstrap copied this machine's name and resolver; a container gets its own at run time.
    rm -f "$mnt/etc/hostname" "$mnt/etc/resolv.conf"

    say "security updates and clean-up in the base image"
    "${BUILDAH[@]}" run "${ISOLATION[@]}" "$ctr" -- sh -c \
        'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get upgrade -y -qq >/dev/null && apt-get clean'
    rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/* "$mnt"/var/cache/debconf/*-old "$mnt"/tmp/* \
        "$mnt"/var/log/*.log "$mnt"/var/log/apt/*
    "${BUILDAH[@]}" umount "$ctr" >/dev/null

    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --cmd bash --label "org.opencontainers.image.description=Debian $suite minbase, made by debootstrap" "$ctr"
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$base" >/dev/null
    trap - EXIT
}

if "${BUILDAH[@]}" inspect --type image "$base" >/dev/null 2>&1; then
    say "base image $base: present"
else
    start=$SECONDS
    say "base image $base: not present, making it"
    make_base
    say "base image $base: made in $((SECONDS - start))s"
fi

# -- cleaning up after ourselves ----------------------------------------------------------------------
# buildah keeps every step's image (--layers) and vfs stores each as a whole copy: a gigabyte or
# more per changed step, on a disk that outlives CI runs. So the script notes the images each build
# made or reused, and after a successful build removes those an earlier build noted and this one
# did not use: the stale cache of old sources. Only images this script noted, nothing else in the
# store (and never `buildah rmi --prune`, which also empties the pip cache mount).
state=/var/tmp/streamjob-build-image.ids
remember_images() {  # LOG add|replace
    local ids
    ids=$(sed -n 's/^--> \(Using cache \)\{0,1\}\([0-9a-f]\{11,64\}\)$/\2/p' "$1" | cut -c1-11 | sort -u)
    if [ "$2" = add ]; then  # a failed build: its images are stale unless a later build reuses them
        { cat "$state" 2>/dev/null || true; echo "$ids"; } | sed '/^$/d' | sort -u >"$state.new"
    else
        local stale
        stale=$(comm -23 <(sort -u "$state" 2>/dev/null || true) <(echo "$ids"))
        if [ -n "$stale" ]; then
            say "removing $(echo "$stale" | wc -l) stale cached images of earlier builds"
            # rmi also drops a removed image's untagged parents that no other image builds on; this
            # build's steps are never among them (no stale image builds on one).
            # shellcheck disable=SC2086  # one ID per word
            "${BUILDAH[@]}" rmi $stale >/dev/null 2>&1 || true  # some may be gone or in use: fine
        fi
        echo "$ids" >"$state.new"
    fi
    mv "$state.new" "$state"
}

# -- the image ----------------------------------------------------------------------------------------
hash=$(source_hash)
current=$("${BUILDAH[@]}" inspect --type image --format "{{index .OCIv1.Config.Labels \"$HASH_LABEL\"}}" "$tag" 2>/dev/null || true)
if [ "$force" = 0 ] && [ "$current" = "$hash" ]; then
    say "image $tag: up to date ($HASH_LABEL=$hash)"
    exit 0
fi
if [ -n "$current" ]; then
    say "image $tag: sources changed, building (label $HASH_LABEL=$current, sources $hash)"
else
    say "image $tag: not present, building"
fi

start=$SECONDS
# This machine's CA bundle is the Dockerfile's optional secret for pip: it includes the CA of a
# TLS-intercepting proxy, where there is one (as here), and is harmless where there is none.
secret=()
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
    secret=(--secret id=ca-certificates,src=/etc/ssl/certs/ca-certificates.crt)
fi
log=$(mktemp "${TMPDIR:-/tmp}/streamjob-build-image.XXXXXX.log")
# --layers: unchanged steps come from buildah's cache (the dependencies' layer above all);
# --pull=never: the base image is the one made above, nothing is fetched from a registry.
# Version and hash go in as build args (the Dockerfile's LABEL), not --label: buildah adds those
# as extra steps at the end, each a full copy of the image with vfs.
if ! "${BUILDAH[@]}" bud "${ISOLATION[@]}" --pull=never --layers "${secret[@]}" \
        --build-arg "STREAMJOB_VERSION=$version" --build-arg "STREAMJOB_SOURCE_HASH=$hash" \
        -t "$tag" -f Dockerfile . 2>&1 | tee "$log"; then
    remember_images "$log" add
    rm -f "$log"
    die "building $tag failed (see the output above)"
fi
say "image $tag: built in $((SECONDS - start))s"
remember_images "$log" replace
rm -f "$log"
