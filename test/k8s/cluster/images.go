package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/podnet/podnet/test/k8s/ociimage"
)

// buildImages writes the pause image (a static pause program) and
// podnet's image (`make image`) as archives in Dir/images: the node pulls
// nothing, so every image it runs is made here.
func (c *Cluster) buildImages() error {
	if err := c.buildPauseImage(); err != nil {
		return err
	}
	// podnet's image the way a user without a registry makes it.
	bin := filepath.Join(c.Dir, "podnet-bin")
	cmd := exec.Command("make", "-C", c.ModuleRoot, "image", "BIN="+bin,
		"IMAGE="+PodnetImage, "IMAGE_TAR="+filepath.Join(c.Dir, "images/podnet.tar"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make image: %w\n%s", err, out)
	}
	return nil
}

// buildPauseImage builds cmd/pause and writes it as the one file of the
// sandbox image, images/pause.tar.
func (c *Cluster) buildPauseImage() error {
	mod := filepath.Join(c.ModuleRoot, "test/k8s")
	pause := filepath.Join(c.Dir, "images/pause")
	if err := goBuild(mod, "./cmd/pause", pause); err != nil {
		return err
	}
	data, err := os.ReadFile(pause)
	if err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(c.Dir, "images/pause.tar"))
	if err != nil {
		return err
	}
	err = ociimage.Write(f, ociimage.Image{
		Name: PauseImage, Entrypoint: []string{"/pause"},
		Files: []ociimage.File{{Path: "/pause", Mode: 0o755, Data: data}},
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// LoadImages imports OCI image archives into every node's containerd, in
// the namespace kubelet's pods use, as `ctr images import` would on a
// machine without a registry. Images a test needs beyond pause and
// podnet's (CoreDNS, the upstream e2e images) come this way.
func (c *Cluster) LoadImages(archives ...string) error {
	for _, n := range c.Nodes {
		for _, a := range archives {
			if err := run(c.containerdCommand("ctr"), "--address", n.containerdSock, "-n", "k8s.io", "images", "import", a); err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
		}
	}
	return nil
}

// TagImage gives the image src a second name, dst, in every node's
// containerd (`ctr images tag`): the same build under another tag, which
// a DaemonSet rolled to dst must start as a new container.
func (c *Cluster) TagImage(src, dst string) error {
	for _, n := range c.Nodes {
		if err := run(c.containerdCommand("ctr"), "--address", n.containerdSock, "-n", "k8s.io", "images", "tag", "--force", src, dst); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return nil
}
