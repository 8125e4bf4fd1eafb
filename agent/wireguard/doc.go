// Package wireguard encrypts pod traffic between nodes (issue 31): the
// node's key pair, the podnet.wg device and its peers.
//
// The private key is generated once and kept in a file of mode 0600
// (DefaultKeyFile) that is read again at every start; it is never
// logged and never leaves the node. The public key goes in the node's
// record (clusterstate.NodeRecord.WireGuardKey), which every datastore
// carries to the other nodes.
//
// The device is kernel WireGuard where netlink can create a link of kind
// wireguard, and otherwise wireguard-go (golang.zx2c4.com/wireguard) in
// the agent's process on a TUN device of the same name, serving the UAPI
// socket /var/run/wireguard/podnet.wg.sock. Either way it is configured
// through wgctrl, the same calls for both: the key, the listen port, and
// one peer per other node whose AllowedIPs are the prefixes agent/route
// routes through podnet.wg to that node (peers.go, pure). A peer whose
// key is not 32 bytes of base64 is skipped and logged by node; the other
// peers are untouched. Peers are reconciled one by one (replacing each
// one's allowed IPs), never by flushing the device, so an agent restart
// does not interrupt traffic on a kernel device.
//
// The key is rotated without a restart (rotate.go): RotateKey writes a
// new one over the file (podnet wireguard rotate-key), and the running
// service, which reads the file every second, publishes its public key
// (Publisher), sets it on the device once the agent's view of the
// datastore has it, and restarts the handshakes with every peer until
// each answers under it. A file gone bad while running leaves the device
// on its key and the service not ready, naming the file.
//
// A kernel device stays when the agent stops, with its peers, as the
// routes do. A userspace device lives in the agent's process and ends
// with it: its TUN device goes, the kernel drops the routes through it,
// and the UAPI socket is removed.
package wireguard
