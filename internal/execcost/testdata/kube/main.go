// A plugin-sized program linking the Kubernetes store (model B, option 1).
package main

import _ "github.com/podnet/podnet/ipam/store/kube"

func main() {}
