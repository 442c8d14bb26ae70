#!/usr/bin/env bash
# PostgreSQL 15 and Redis for a machine that has neither and cannot install them (the 16-core GPU
# host the load run was repeated on): `pack` (here, on Debian 12 with both installed) bundles the
# binaries and the shared libraries they load; `start DIR` (there) unpacks and starts them on
# 127.0.0.1:5432 (user postgres, trust auth) and 127.0.0.1:6379, under an unprivileged user since
# PostgreSQL refuses to run as root.
set -euo pipefail

case "${1:-}" in
pack)
    out=${2:-.pgpack/pgpack.tar.xz}
    work=$(mktemp -d)
    pack=$work/pgpack
    mkdir -p "$pack/lib" "$pack/root/usr/lib/postgresql" "$pack/root/usr/share/postgresql"
    cp -r /usr/lib/postgresql/15 "$pack/root/usr/lib/postgresql/"
    cp -r /usr/share/postgresql/15 "$pack/root/usr/share/postgresql/"
    bin=$pack/root/usr/lib/postgresql/15/bin
    (cd "$bin" && ls | grep -v -E '^(initdb|pg_ctl|postgres|postmaster|pg_isready|psql)$' | xargs rm -f)
    rm -rf "$pack/root/usr/lib/postgresql/15/lib/"{llvmjit*,bitcode,pgxs}
    cp -L /usr/bin/redis-server "$pack/redis-server"
    # Every library they load but the C library's own (the host's glibc is newer).
    for b in "$bin"/* "$pack"/root/usr/lib/postgresql/15/lib/*.so "$pack/redis-server"; do ldd "$b" 2>/dev/null || true; done |
        awk '{print $3}' | grep / | sort -u | grep -v -E '/(libc|libm|libpthread|libdl|librt)\.so|ld-linux' |
        xargs -I{} cp -L {} "$pack/lib/"
    mkdir -p "$(dirname "$out")"
    tar -C "$work" -cJf "$out" pgpack
    rm -rf "$work"
    ls -l "$out"
    ;;
start)
    archive=${2:?usage: $0 start ARCHIVE}
    root=/tmp/kl-services
    mkdir -p $root && tar -xJf "$archive" -C $root
    id klpg >/dev/null 2>&1 || useradd -M -s /bin/bash klpg
    chown -R klpg $root
    lib=$root/pgpack/lib bin=$root/pgpack/root/usr/lib/postgresql/15/bin
    su klpg -s /bin/bash -c "LD_LIBRARY_PATH=$lib $bin/initdb -D $root/data -U postgres --auth=trust -E UTF8 \
        --locale=C.UTF-8 >$root/initdb.log 2>&1 && LD_LIBRARY_PATH=$lib $bin/pg_ctl -D $root/data -w \
        -o '-p 5432 -k $root -c listen_addresses=127.0.0.1 -c max_connections=400' -l $root/pg.log start"
    LD_LIBRARY_PATH=$lib $root/pgpack/redis-server --port 6379 --bind 127.0.0.1 --daemonize yes --save "" \
        --logfile $root/redis.log
    ;;
*)
    echo "usage: $0 pack [OUT] | start ARCHIVE" >&2
    exit 2
    ;;
esac
