// A plugin-sized program linking the gateway store plugins use.
package main

import _ "github.com/podnet/podnet/ipam/store/etcdgw"

func main() {}
