// A plugin that does nothing: what a runtime and one exec of a small
// static Go program cost a pod, the floor under any exec'd plugin.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

func main() {
	conf, _ := io.ReadAll(os.Stdin)
	var c struct {
		CNIVersion string `json:"cniVersion"`
	}
	_ = json.Unmarshal(conf, &c)
	switch os.Getenv("CNI_COMMAND") {
	case "ADD":
		fmt.Printf(`{"cniVersion":%q,"interfaces":[{"name":%q,"sandbox":%q}],"ips":[{"address":"10.9.0.2/32","interface":0}]}`,
			c.CNIVersion, os.Getenv("CNI_IFNAME"), os.Getenv("CNI_NETNS"))
	case "VERSION":
		fmt.Print(`{"cniVersion":"1.1.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`)
	}
}
