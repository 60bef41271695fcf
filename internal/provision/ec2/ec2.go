// Package ec2 provisions managed instances as EC2 instances: the capacity
// provider's launch template picks the instance type (attribute-based, from
// the region's catalog) and the network, storage and monitoring of a
// RunInstances call; the user data installs and starts the agent with the
// instance's own credential. Every instance carries tags naming this
// deployment (an owner ID kept in etcd), the cluster, the capacity
// provider and Capstan's instance ID; a sweep terminates tagged instances
// no record knows (launched by a server that stopped before noting them),
// and nothing untagged is ever touched. See docs/ec2.md.
package ec2

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/events"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/provision"
	"github.com/capstanhq/capstan/internal/store"
)

// Tags Capstan puts on what it launches.
const (
	TagOwner            = "capstan:owner"
	TagCluster          = "capstan:cluster"
	TagCapacityProvider = "capstan:capacity-provider"
	TagInstanceID       = "capstan:instance-id"
)

// ownerKey holds this deployment's owner ID in etcd: every server sharing
// the store tags with, and sweeps, the same instances.
const ownerKey = "provision/ec2-owner"

// Config sets up the provisioner.
type Config struct {
	Client *ec2.Client
	// ImageID is the AMI instances boot (required): it must run systemd
	// and Docker, and have the agent or reach AgentURL.
	ImageID string
	// AgentURL is where the boot script fetches the agent's .deb when the
	// image lacks capstan-agent ("": the image has it).
	AgentURL string
	Fleet    *fleet.State
	Log      *slog.Logger
	// SweepEvery is how often untracked instances are looked for (0: 30 s).
	SweepEvery time.Duration
}

// Provisioner launches EC2 instances.
type Provisioner struct {
	cfg    Config
	owner  string
	arch   string
	root   string // the image's root device name
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	types []types.InstanceTypeInfo
	// seen is the state of every tagged instance at the last listing;
	// launched, instances launched since (a listing may lag a launch).
	seen     map[string]types.InstanceStateName
	seenAt   time.Time
	launched map[string]time.Time
}

// New checks the image, reads (or creates) the owner ID and starts the
// sweep.
func New(ctx context.Context, cfg Config) (*Provisioner, error) {
	if cfg.ImageID == "" {
		return nil, errors.New("--provisioner ec2 needs --ec2-image-id: the AMI managed instances boot")
	}
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = 30 * time.Second
	}
	img, err := cfg.Client.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{cfg.ImageID}})
	if err != nil {
		return nil, fmt.Errorf("ec2 provisioner: describe image %s: %w", cfg.ImageID, err)
	}
	if len(img.Images) != 1 {
		return nil, fmt.Errorf("ec2 provisioner: image %s not found", cfg.ImageID)
	}
	owner, err := ownerID(ctx, cfg.Fleet.Store)
	if err != nil {
		return nil, fmt.Errorf("ec2 provisioner: owner ID: %w", err)
	}
	p := &Provisioner{cfg: cfg, owner: owner, arch: string(img.Images[0].Architecture), root: aws.ToString(img.Images[0].RootDeviceName),
		seen: map[string]types.InstanceStateName{}, launched: map[string]time.Time{}, done: make(chan struct{})}
	sctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.sweepLoop(sctx)
	return p, nil
}

// ownerID is the deployment's owner ID, created by the first server.
func ownerID(ctx context.Context, st *store.Store) (string, error) {
	for range 3 {
		it, err := store.Get[string](ctx, st, ownerKey)
		if err == nil {
			return it.Value, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return "", err
		}
		var b [8]byte
		rand.Read(b[:])
		if _, err := st.Txn().Create(ownerKey, "capstan-"+hex.EncodeToString(b[:])).Commit(ctx); err != nil && !errors.Is(err, store.ErrConflict) {
			return "", err
		}
	}
	return "", errors.New("could not read or create it")
}

func (p *Provisioner) Name() string { return "ec2" }

// Owner is the owner tag's value.
func (p *Provisioner) Owner() string { return p.owner }

// Close stops the sweep.
func (p *Provisioner) Close() error {
	p.cancel()
	<-p.done
	return nil
}

// capacityCodes are the EC2 errors that mean no capacity for a type or a
// limit reached: the launch fails with an event, and the controller backs
// off.
var capacityCodes = map[string]bool{"InsufficientInstanceCapacity": true, "InstanceLimitExceeded": true,
	"VcpuLimitExceeded": true, "InsufficientFreeAddressesInSubnet": true, "Unsupported": true,
	"SpotMaxPriceTooLow": true, "MaxSpotInstanceCountExceeded": true, "ReservationCapacityExceeded": true}

// maxTypes is how many instance types one launch tries when EC2 has no
// capacity for the first.
const maxTypes = 3

// Launch runs one instance for req.
func (p *Provisioner) Launch(ctx context.Context, req provision.Request) (string, error) {
	handle, err := p.launch(ctx, req)
	if err != nil {
		p.event(ctx, req, err)
		return "", err
	}
	return handle, nil
}

func (p *Provisioner) launch(ctx context.Context, req provision.Request) (string, error) {
	cp, err := p.cfg.Fleet.CapacityProvider(ctx, req.CapacityProvider)
	if err != nil {
		return "", err
	}
	var lt shapes.InstanceLaunchTemplate
	if cp.ManagedInstancesProvider != nil && cp.ManagedInstancesProvider.InstanceLaunchTemplate != nil {
		lt = *cp.ManagedInstancesProvider.InstanceLaunchTemplate
	}
	all, err := p.catalog(ctx)
	if err != nil {
		return "", err
	}
	n := needs{req: lt.InstanceRequirements, minVCPU: (req.CPU + 1023) / 1024, minMemoryMiB: req.MemoryMiB, arch: p.arch}
	candidates := choose(all, n)
	if len(candidates) == 0 {
		return "", fmt.Errorf("no EC2 instance type meets capacity provider %s's instanceRequirements with %d vCPUs and %d MiB (architecture %s)",
			req.CapacityProvider, n.minVCPU, n.minMemoryMiB, p.arch)
	}
	ud, err := UserData(req.ID, req.Cluster, req.CapacityProvider, machineEnv(req.Env), p.cfg.AgentURL)
	if err != nil {
		return "", err
	}
	in := p.runInput(req, lt, ud)
	var errs []error
	for _, it := range candidates[:min(len(candidates), maxTypes)] {
		in.InstanceType = types.InstanceType(it)
		// The token makes a retry of the same launch return the same
		// instance; a new type is a new launch.
		in.ClientToken = aws.String(clientToken(p.owner, req.ID, it))
		out, err := p.cfg.Client.RunInstances(ctx, in)
		if err == nil && len(out.Instances) == 1 {
			id := aws.ToString(out.Instances[0].InstanceId)
			p.mu.Lock()
			p.launched[id] = time.Now()
			p.mu.Unlock()
			p.cfg.Log.Info("launched EC2 instance", "id", req.ID, "ec2_instance", id, "instance_type", it, "capacity_provider", req.CapacityProvider)
			return id, nil
		}
		if err == nil {
			err = fmt.Errorf("RunInstances returned %d instances", len(out.Instances))
		}
		errs = append(errs, fmt.Errorf("%s: %w", it, err))
		if code(err) != "InsufficientInstanceCapacity" {
			break
		}
	}
	return "", fmt.Errorf("run EC2 instance: %w", errors.Join(errs...))
}

// machineEnv is the request's agent settings for an agent alone on its
// machine: the metrics and metadata addresses the controller asks for let
// many agents share one host, and the agent's defaults fit a machine of
// its own (metadata on the docker0 bridge, as ECS's agent serves it).
// The operator's settings (req.Settings) are part of req.Env.
func machineEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		if k != "CAPSTAN_METRICS_ADDR" && k != "CAPSTAN_METADATA_ADDR" {
			out[k] = v
		}
	}
	return out
}

// clientToken is at most 64 characters, as EC2 takes.
func clientToken(owner, id, instanceType string) string {
	h := fnv.New64a()
	h.Write([]byte(owner + "/" + id + "/" + instanceType))
	return fmt.Sprintf("%s-%x", id, h.Sum64())
}

// runInput maps the launch template onto RunInstances.
func (p *Provisioner) runInput(req provision.Request, lt shapes.InstanceLaunchTemplate, userData string) *ec2.RunInstancesInput {
	tags := []types.Tag{
		{Key: aws.String("Name"), Value: aws.String("capstan " + req.Cluster + "/" + req.ID)},
		{Key: aws.String(TagOwner), Value: aws.String(p.owner)},
		{Key: aws.String(TagCluster), Value: aws.String(req.Cluster)},
		{Key: aws.String(TagCapacityProvider), Value: aws.String(req.CapacityProvider)},
		{Key: aws.String(TagInstanceID), Value: aws.String(req.ID)},
	}
	in := &ec2.RunInstancesInput{
		ImageId: aws.String(p.cfg.ImageID), MinCount: aws.Int32(1), MaxCount: aws.Int32(1),
		UserData: aws.String(base64.StdEncoding.EncodeToString([]byte(userData))),
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: tags},
			{ResourceType: types.ResourceTypeVolume, Tags: tags},
		},
		Monitoring: &types.RunInstancesMonitoringEnabled{Enabled: aws.Bool(lt.Monitoring == "DETAILED")},
		// The user data holds a credential: instance metadata asks for a
		// session token (IMDSv2), which a forwarded request cannot get.
		MetadataOptions: &types.InstanceMetadataOptionsRequest{HttpTokens: types.HttpTokensStateRequired},
	}
	if aws.ToBool(lt.InstanceMetadataTagsPropagation) {
		in.MetadataOptions.InstanceMetadataTags = types.InstanceMetadataTagsStateEnabled
	}
	if lt.Ec2InstanceProfileArn != "" {
		in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Arn: aws.String(lt.Ec2InstanceProfileArn)}
	}
	if nc := lt.NetworkConfiguration; nc != nil {
		if len(nc.Subnets) > 0 {
			// Instances spread over the subnets (and so their zones) by ID.
			h := fnv.New32a()
			h.Write([]byte(req.ID))
			in.SubnetId = aws.String(nc.Subnets[int(h.Sum32()%uint32(len(nc.Subnets)))])
		}
		in.SecurityGroupIds = nc.SecurityGroups
	}
	if sc := lt.StorageConfiguration; sc != nil && sc.StorageSizeGiB != nil && p.root != "" {
		in.BlockDeviceMappings = []types.BlockDeviceMapping{{DeviceName: aws.String(p.root),
			Ebs: &types.EbsBlockDevice{VolumeSize: sc.StorageSizeGiB, VolumeType: types.VolumeTypeGp3, DeleteOnTermination: aws.Bool(true), Encrypted: aws.Bool(true)}}}
	}
	if aws.ToBool(lt.NitroEnclavesEnabled) {
		in.EnclaveOptions = &types.EnclaveOptionsRequest{Enabled: aws.Bool(true)}
	}
	if lt.CapacityOptionType == "SPOT" {
		// A one-time request that ends with the instance: a reclaimed
		// instance is terminated and replaced like any lost one. No max
		// price: EC2's default caps it at the on-demand price.
		in.InstanceMarketOptions = &types.InstanceMarketOptionsRequest{MarketType: types.MarketTypeSpot,
			SpotOptions: &types.SpotMarketOptions{SpotInstanceType: types.SpotInstanceTypeOneTime,
				InstanceInterruptionBehavior: types.InstanceInterruptionBehaviorTerminate}}
	}
	in.CapacityReservationSpecification = reservationSpec(lt)
	return in
}

// reservationSpec maps capacityReservations onto RunInstances: a
// reservation group is targeted (EC2 launches on-demand when the group
// has no room, unless the preference is RESERVATIONS_ONLY and no group is
// named); without one the preference is EC2's capacity-reservations-only,
// open or none. capacityOptionType RESERVED alone means
// RESERVATIONS_ONLY.
func reservationSpec(lt shapes.InstanceLaunchTemplate) *types.CapacityReservationSpecification {
	pref, group := "", ""
	if cr := lt.CapacityReservations; cr != nil {
		pref, group = cr.ReservationPreference, cr.ReservationGroupArn
	}
	if pref == "" && lt.CapacityOptionType == "RESERVED" {
		pref = "RESERVATIONS_ONLY"
	}
	if lt.CapacityOptionType == "SPOT" || (pref == "" && group == "") {
		return nil // spot instances cannot use capacity reservations
	}
	if pref == "RESERVATIONS_EXCLUDED" {
		return &types.CapacityReservationSpecification{CapacityReservationPreference: types.CapacityReservationPreferenceNone}
	}
	if group != "" {
		return &types.CapacityReservationSpecification{CapacityReservationTarget: &types.CapacityReservationTarget{
			CapacityReservationResourceGroupArn: aws.String(group)}}
	}
	if pref == "RESERVATIONS_ONLY" {
		return &types.CapacityReservationSpecification{CapacityReservationPreference: types.CapacityReservationPreferenceCapacityReservationsOnly}
	}
	return &types.CapacityReservationSpecification{CapacityReservationPreference: types.CapacityReservationPreferenceOpen}
}

// code is an AWS error's code, or "".
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// event records a failed launch in the cluster's events, a warning whose
// failure type is EC2's error code (a capacity code, or LaunchFailed).
func (p *Provisioner) event(ctx context.Context, req provision.Request, err error) {
	ft := "LaunchFailed"
	var ae smithy.APIError
	if errors.As(err, &ae) && capacityCodes[ae.ErrorCode()] {
		ft = ae.ErrorCode()
	}
	p.cfg.Fleet.Events().Record(ctx, req.Cluster, events.InstanceLaunchImpairedEvent(events.LaunchFailure{
		ClusterArn: p.cfg.Fleet.ARNs.Cluster(req.Cluster), CapacityProviderArn: p.cfg.Fleet.ARNs.CapacityProvider(req.CapacityProvider),
		CapacityProviderName: req.CapacityProvider, FailureType: ft, CreatedAt: time.Now(), Reason: err.Error()}))
}

// Terminate terminates the instance.
func (p *Provisioner) Terminate(ctx context.Context, handle string) error {
	if handle == "" {
		return provision.ErrUnknown
	}
	_, err := p.cfg.Client.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{handle}})
	if strings.HasPrefix(code(err), "InvalidInstanceID") {
		return provision.ErrUnknown
	}
	if err != nil {
		return fmt.Errorf("terminate EC2 instance %s: %w", handle, err)
	}
	p.mu.Lock()
	p.seen[handle] = types.InstanceStateNameShuttingDown
	delete(p.launched, handle)
	p.mu.Unlock()
	p.cfg.Log.Info("terminated EC2 instance", "ec2_instance", handle)
	return nil
}

// listEvery is the most often Alive lists the tagged instances: one
// paginated call answers a pass over thousands of instances.
const listEvery = 5 * time.Second

// launchLag is how long a new instance is alive without showing in a
// listing (EC2's reads are eventually consistent).
const launchLag = 2 * time.Minute

// Alive reports whether the instance is pending or running.
func (p *Provisioner) Alive(ctx context.Context, handle string) (bool, error) {
	if handle == "" {
		return false, nil
	}
	p.mu.Lock()
	stale := time.Since(p.seenAt) > listEvery
	p.mu.Unlock()
	if stale {
		if _, err := p.list(ctx); err != nil {
			return false, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.seen[handle]; ok {
		return st == types.InstanceStateNamePending || st == types.InstanceStateNameRunning, nil
	}
	at, ok := p.launched[handle]
	return ok && time.Since(at) < launchLag, nil
}

// tagged is one instance carrying this owner's tag.
type tagged struct {
	id, cluster, capstanID string
	state                  types.InstanceStateName
}

// list reads every instance with this owner's tag and notes their states.
func (p *Provisioner) list(ctx context.Context) ([]tagged, error) {
	begun := time.Now()
	var out []tagged
	seen := map[string]types.InstanceStateName{}
	pages := ec2.NewDescribeInstancesPaginator(p.cfg.Client, &ec2.DescribeInstancesInput{
		Filters: []types.Filter{{Name: aws.String("tag:" + TagOwner), Values: []string{p.owner}}}})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("describe EC2 instances: %w", err)
		}
		for _, r := range page.Reservations {
			for _, in := range r.Instances {
				t := tagged{id: aws.ToString(in.InstanceId)}
				if in.State != nil {
					t.state = in.State.Name
				}
				for _, tag := range in.Tags {
					switch aws.ToString(tag.Key) {
					case TagCluster:
						t.cluster = aws.ToString(tag.Value)
					case TagInstanceID:
						t.capstanID = aws.ToString(tag.Value)
					}
				}
				seen[t.id] = t.state
				out = append(out, t)
			}
		}
	}
	p.mu.Lock()
	p.seen, p.seenAt = seen, begun
	for id, at := range p.launched {
		if _, ok := seen[id]; ok || time.Since(at) > launchLag {
			delete(p.launched, id)
		}
	}
	p.mu.Unlock()
	return out, nil
}

func (p *Provisioner) sweepLoop(ctx context.Context) {
	defer close(p.done)
	for {
		if n, err := p.Sweep(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Log.Warn("ec2 sweep", "err", err)
		} else if n > 0 {
			p.cfg.Log.Info("ec2 sweep terminated untracked instances", "instances", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.cfg.SweepEvery):
		}
	}
}

// Sweep terminates the instances with this owner's tag that no managed
// instance record accounts for: its record is gone (it was launched by a
// server that stopped before noting it, and the record was dropped as a
// failed launch), or the record names another EC2 instance (a launch made
// twice). An instance whose record has no handle yet is left alone: its
// launch may be in flight. Instances are listed before records are read,
// and a record is written before its launch, so a listed instance's record
// is never missed. It returns how many it terminated.
func (p *Provisioner) Sweep(ctx context.Context) (int, error) {
	all, err := p.list(ctx)
	if err != nil {
		return 0, err
	}
	var doomed []string
	for _, t := range all {
		if t.state != types.InstanceStateNamePending && t.state != types.InstanceStateNameRunning &&
			t.state != types.InstanceStateNameStopped && t.state != types.InstanceStateNameStopping {
			continue
		}
		if t.cluster == "" || t.capstanID == "" {
			// Tagged by hand with the owner only: not one of ours.
			continue
		}
		it, err := store.Get[fleet.ManagedInstance](ctx, p.cfg.Fleet.Store, fleet.ManagedInstanceKey(t.cluster, t.capstanID))
		switch {
		case errors.Is(err, store.ErrNotFound):
			doomed = append(doomed, t.id)
		case err != nil:
			return 0, err
		case it.Value.Handle != "" && it.Value.Handle != t.id:
			doomed = append(doomed, t.id)
		}
	}
	for _, id := range doomed {
		p.cfg.Log.Warn("terminating EC2 instance no managed instance record accounts for", "ec2_instance", id)
		if err := p.Terminate(ctx, id); err != nil && !errors.Is(err, provision.ErrUnknown) {
			return 0, err
		}
	}
	return len(doomed), nil
}
