// A plugin-sized program linking the full etcd client store.
package main

import _ "github.com/podnet/podnet/ipam/store/etcd"

func main() {}
