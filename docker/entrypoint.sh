#!/bin/sh
# The image's one entrypoint: operator | driver | executor. Each execs its process, so signals
# (SIGTERM from the kubelet) reach it directly.
#   operator ARGS...  the StreamJob operator:             streamjob operator ARGS...
#   driver ARGS...    a job's driver (the job manager):  streamjob ARGS...  (e.g. driver run job.py ...)
#   executor          a Spark executor, as Spark's Kubernetes backend starts it: everything it
#                     needs comes in the SPARK_* environment variables Spark sets on the pod.
set -eu

usage() {
    echo "usage: entrypoint.sh operator [ARGS...] | driver ARGS... | executor" >&2
    exit 2
}

[ $# -ge 1 ] || usage
role=$1
shift

case "$role" in
    operator)
        exec streamjob operator "$@"
        ;;
    driver)
        [ $# -ge 1 ] || usage
        exec streamjob "$@"
        ;;
    executor)
        for var in SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_APPLICATION_ID; do
            eval "value=\${$var:-}"
            if [ -z "$value" ]; then
                echo "entrypoint.sh executor: $var is not set (Spark's Kubernetes backend sets it on executor pods)" >&2
                exit 2
            fi
        done
        jars=$(python3 -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
        # Spark passes the executor's JVM options as SPARK_JAVA_OPT_0, _1, ... (in order).
        set --
        i=0
        while eval "[ -n \"\${SPARK_JAVA_OPT_$i+set}\" ]"; do
            eval "set -- \"\$@\" \"\${SPARK_JAVA_OPT_$i}\""
            i=$((i + 1))
        done
        memory=${SPARK_EXECUTOR_MEMORY:-1g}
        exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" "$@" "-Xms$memory" "-Xmx$memory" \
            -cp "${SPARK_CLASSPATH:-$jars/*}" \
            org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
            --driver-url "$SPARK_DRIVER_URL" --executor-id "$SPARK_EXECUTOR_ID" \
            --cores "$SPARK_EXECUTOR_CORES" --app-id "$SPARK_APPLICATION_ID" \
            --hostname "${SPARK_EXECUTOR_POD_IP:-$(hostname -i)}" \
            --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
            --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}"
        ;;
    *)
        usage
        ;;
esac
