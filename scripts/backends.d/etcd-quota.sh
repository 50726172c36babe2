# shellcheck shell=bash disable=SC2153 # ETCD_HEARTBEAT_MS ... are set in etcd.sh
# scripts/backends.d/etcd-quota.sh — `etcd-quota`: a single etcd with a small space quota
# (`--quota-backend-bytes` 16 MiB), which a test fills until etcd raises its NOSPACE alarm and
# refuses writes (backend-etcd/tests/nospace.rs), then compacts, defragments and disarms again. A
# server kind for scripts/backends (the interface is described in lib.sh); loaded after etcd.sh,
# whose heartbeat and election settings and readiness check it shares.

register_ids etcd-quota single etcd-quota
need_command etcd etcd-server
need_command etcdctl etcd-client

readonly ETCD_QUOTA_BYTES=$((16 * 1024 * 1024))

etcd_quota_ports() { # client 23795, peer 23805
    port 23795
    port 23805
}

etcd_quota_start() {
    local id=$1
    etcd_launch_alone "$id" etcd-quota http "$(host_of "$id")" "$(port 23795)" "$(port 23805)" locksmith-quota \
        --quota-backend-bytes "$ETCD_QUOTA_BYTES"
}

etcd_quota_ready() { etcd_ready "$1"; }

etcd_quota_exports() {
    [[ $1 == single ]] || return 0
    emit LOCKSMITH_TEST_ETCD_QUOTA "etcd://$(address etcd-quota)"
}
