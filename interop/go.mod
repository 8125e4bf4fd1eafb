module github.com/podnet/podnet/interop

go 1.26.0

require (
	github.com/containernetworking/cni v1.3.1
	github.com/containernetworking/plugins v1.9.1
	github.com/podnet/podnet v0.0.0
)

require (
	github.com/alexflint/go-filemutex v1.3.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/coreos/go-iptables v0.8.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-shellwords v1.0.12 // indirect
	github.com/networkplumbing/go-nft v0.4.0 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/safchain/ethtool v0.6.2 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	go.opentelemetry.io/otel v1.45.0 // indirect
	go.opentelemetry.io/otel/trace v1.45.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	sigs.k8s.io/knftables v0.0.18 // indirect
)

replace github.com/podnet/podnet => ../

tool (
	github.com/containernetworking/cni/cnitool
	github.com/containernetworking/plugins/plugins/ipam/host-local
	github.com/containernetworking/plugins/plugins/main/bridge
	github.com/containernetworking/plugins/plugins/main/loopback
	github.com/containernetworking/plugins/plugins/main/ptp
	github.com/containernetworking/plugins/plugins/meta/bandwidth
	github.com/containernetworking/plugins/plugins/meta/portmap
	github.com/containernetworking/plugins/plugins/meta/tuning
)
