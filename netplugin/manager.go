package netplugin

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PluginManager wraps a NetworkPlugin with what every plugin needs and
// none should write: one lock per pod, so the same pod's set-up, tear-down
// and status never interleave while different pods proceed in parallel;
// kubelet's metrics; and errors that name the plugin and the pod.
//
// Locking rule: only the public methods take the pod lock, and they take
// nothing else; the plugin does its own locking for its own state.
type PluginManager struct {
	plugin  NetworkPlugin
	locks   podLocks
	metrics *metrics
}

// NewPluginManager wraps plugin. Metrics are registered with reg; a nil
// reg keeps them unregistered (they are still counted).
func NewPluginManager(plugin NetworkPlugin, reg prometheus.Registerer) (*PluginManager, error) {
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registering network plugin metrics: %w", err)
	}
	return &PluginManager{plugin: plugin, metrics: m}, nil
}

// PluginName returns the wrapped plugin's name.
func (pm *PluginManager) PluginName() string { return pm.plugin.Name() }

// Plugin returns the wrapped plugin.
func (pm *PluginManager) Plugin() NetworkPlugin { return pm.plugin }

// Event passes an event on to the plugin.
func (pm *PluginManager) Event(name string, details map[string]any) { pm.plugin.Event(name, details) }

// Status returns the plugin's readiness.
func (pm *PluginManager) Status() error { return pm.plugin.Status() }

func podKey(pod PodRef) string { return pod.Namespace + "/" + pod.Name }

// SetUpPod sets up the pod's network and returns its status.
func (pm *PluginManager) SetUpPod(ctx context.Context, pod PodRef, sandboxID string, opts *PodOptions) (*PodNetworkStatus, error) {
	defer pm.locks.lock(podKey(pod))()
	start := time.Now()
	st, err := pm.plugin.SetUpPod(ctx, pod, sandboxID, opts)
	pm.metrics.record(OpSetUpPod, start, err)
	if err != nil {
		return nil, fmt.Errorf("NetworkPlugin %s failed to set up pod %q network: %w", pm.plugin.Name(), pod.String(), err)
	}
	return st, nil
}

// TearDownPod tears the pod's network down.
func (pm *PluginManager) TearDownPod(ctx context.Context, pod PodRef, sandboxID string) error {
	defer pm.locks.lock(podKey(pod))()
	start := time.Now()
	err := pm.plugin.TearDownPod(ctx, pod, sandboxID)
	pm.metrics.record(OpTearDownPod, start, err)
	if err != nil {
		return fmt.Errorf("NetworkPlugin %s failed to teardown pod %q network: %w", pm.plugin.Name(), pod.String(), err)
	}
	return nil
}

// GetPodNetworkStatus reports the pod's addresses.
func (pm *PluginManager) GetPodNetworkStatus(ctx context.Context, pod PodRef, sandboxID string) (*PodNetworkStatus, error) {
	defer pm.locks.lock(podKey(pod))()
	start := time.Now()
	st, err := pm.plugin.GetPodNetworkStatus(ctx, pod, sandboxID)
	pm.metrics.record(OpGetPodNetworkStatus, start, err)
	if err != nil {
		return nil, fmt.Errorf("NetworkPlugin %s failed on the status hook for pod %q: %w", pm.plugin.Name(), pod.String(), err)
	}
	return st, nil
}

// GC releases attachments of sandboxes not in validSandboxIDs, when the
// plugin can.
func (pm *PluginManager) GC(ctx context.Context, validSandboxIDs []string) error {
	gc, ok := pm.plugin.(GarbageCollector)
	if !ok {
		return nil
	}
	return gc.GC(ctx, validSandboxIDs)
}
