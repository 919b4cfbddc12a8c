"""The configuration files of one node's daemons: containerd, the CNI bridge, the kubelet
and kube-proxy, filled in for that node."""

from __future__ import annotations

import json
import string

from testbed.local_cluster.layout import CNI_BRIDGE, Node
from testbed.local_cluster.system_images import PAUSE_IMAGE


def cni_config(node: Node) -> str:
    conf = {
        "cniVersion": "1.0.0",
        "name": "kubeslurm",
        "plugins": [
            {
                "type": "bridge",
                "bridge": CNI_BRIDGE,
                "isGateway": True,
                # Masquerading is ours (host.setup_network): only traffic
                # leaving the cluster, so pods see each other's real
                # addresses across nodes (Slurm connects back to them).
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.dir / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(conf, indent=2)


def containerd_config(node: Node) -> str:
    return CONTAINERD_CONFIG.substitute(
        root=node.dir / "containerd" / "root",
        state=node.run_dir / "containerd",
        socket=node.containerd_socket,
        opt=node.dir / "containerd" / "opt",
        pause=PAUSE_IMAGE,
        cni_conf=node.dir / "cni" / "net.d",
    )


CONTAINERD_CONFIG = string.Template("""\
# containerd 1.6 (Debian bookworm) for one node of kubeslurm's local cluster.
version = 2
root = "$root"
state = "$state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$socket"

[ttrpc]
  address = "$socket.ttrpc"

[debug]
  level = "warn"

[plugins."io.containerd.internal.v1.opt"]
  path = "$opt"

[plugins."io.containerd.grpc.v1.cri"]
  # Built locally and imported: no registry is reachable.
  sandbox_image = "$pause"
  # No AppArmor/SELinux on this host.
  disable_apparmor = true
  enable_selinux = false
  # Pod network namespaces under this containerd's state dir, not /run/netns,
  # so `down` finds exactly ours.
  netns_mounts_under_state_dir = true
  # This machine withholds CAP_SYS_RESOURCE even from root, so runc cannot
  # lower oom_score_adj (the kubelet asks -998 for sandboxes): "can't get final
  # child's PID from pipe: EOF". Clamp to containerd's own value instead.
  restrict_oom_score_adj = true
  max_container_log_line_size = 16384
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        # cgroupfs, like the kubelet: there is no systemd on this machine.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$cni_conf"
    max_conf_num = 1
""")

KUBELET_CONFIG = string.Template("""\
# kubelet 1.30 of one node of kubeslurm's local cluster.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $address
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $ca}
authorization:
  mode: Webhook
tlsCertFile: $cert
tlsPrivateKeyFile: $key
containerRuntimeEndpoint: $runtime
clusterDNS: [$dns_ip]
clusterDomain: $domain
resolvConf: /etc/resolv.conf
podCIDR: $pod_cidr
# Not the default /var/log/pods: two kubelets on one host would each treat the
# other's log directories as orphans and delete them.
podLogsDir: $pod_logs_dir
# No systemd here; cgroup v1 controllers (the v2 tree at /sys/fs/cgroup/unified
# is ignored). Each node gets its own cgroup root so two kubelets on one host
# do not manage each other's pods.
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: $cgroup_root
enforceNodeAllocatable: [pods]
failSwapOn: false
protectKernelDefaults: false
# A shared development disk: evict late, never garbage-collect the imported
# images (they cannot be pulled again).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  nodefs.inodesFree: 2%
  imagefs.available: 2%
serializeImagePulls: false
maxPods: 110
rotateCertificates: false
serverTLSBootstrap: false
""")

KUBE_PROXY_CONFIG = string.Template("""\
# kube-proxy 1.30, iptables mode, inside the node's network namespace.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $kubeconfig
clusterCIDR: $cluster_cidr
hostnameOverride: $node
bindAddress: $node_ip
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# conntrack sysctls are global or read-only outside the initial network
# namespace: leave them as they are (0 = do not touch).
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
""")
