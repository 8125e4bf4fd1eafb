// A plugin-sized program linking the agent's socket store (model B,
// option 2).
package main

import _ "github.com/podnet/podnet/ipam/store/agentsock"

func main() {}
