package console

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// capacityRow is one capacity provider of the cluster as the tab shows it.
type capacityRow struct {
	shapes.CapacityProvider
	Settings  []string // managed instance settings, one line each
	Instances int      // registered instances (any status)
	Active    int
	Daemons   []string // daemon ARNs it runs
}

func (c *Console) capacityTab(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.URL.Query().Get("name")
	cl, err := c.describeCluster(r, s, name)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	rows, err := c.capacityProviders(r, s, cl)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "cluster", s, map[string]any{"Cluster": cl, "Tab": "capacity", "Tabs": tabs, "Capacity": rows})
}

func (c *Console) capacityProviders(r *http.Request, s *session, cl cluster) ([]capacityRow, error) {
	var cps []shapes.CapacityProvider
	in := map[string]any{"cluster": cl.ClusterArn}
	for range 200 {
		var out shapes.DescribeCapacityProvidersResponse
		if err := c.call(r, s, "DescribeCapacityProviders", in, &out); err != nil {
			return nil, err
		}
		cps = append(cps, out.CapacityProviders...)
		if out.NextToken == "" {
			break
		}
		in["nextToken"] = out.NextToken
	}
	insts, err := c.containerInstances(r, s, cl.ClusterName)
	if err != nil {
		return nil, err
	}
	var rows []capacityRow
	for _, cp := range cps {
		row := capacityRow{CapacityProvider: cp, Settings: managedSettings(cp.ManagedInstancesProvider)}
		for _, ci := range insts {
			if ci.CapacityProviderName == cp.Name {
				row.Instances++
				if ci.Status == "ACTIVE" {
					row.Active++
				}
			}
		}
		if cp.Type == "MANAGED_INSTANCES" || cp.ManagedInstancesProvider != nil {
			if row.Daemons, err = c.daemonsOn(r, s, cl.ClusterArn, cp.Name); err != nil {
				return nil, err
			}
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

// daemonsOn lists the daemons of the cluster that run on capacity provider cp.
func (c *Console) daemonsOn(r *http.Request, s *session, clusterArn, cp string) ([]string, error) {
	var arns []string
	in := map[string]any{"clusterArn": clusterArn, "capacityProviderArns": []string{cp}}
	for range 200 {
		var out shapes.ListDaemonsResponse
		if err := c.call(r, s, "ListDaemons", in, &out); err != nil {
			return nil, err
		}
		for _, d := range out.DaemonSummariesList {
			arns = append(arns, d.DaemonArn)
		}
		if out.NextToken == "" {
			break
		}
		in["nextToken"] = out.NextToken
	}
	sort.Strings(arns)
	return arns, nil
}

// managedSettings summarises a managed instances provider in a few lines.
func managedSettings(m *shapes.ManagedInstancesProvider) []string {
	if m == nil {
		return nil
	}
	var out []string
	add := func(label, v string) {
		if v != "" {
			out = append(out, label+": "+v)
		}
	}
	add("infrastructure role", m.InfrastructureRoleArn)
	add("propagate tags", m.PropagateTags)
	if lt := m.InstanceLaunchTemplate; lt != nil {
		add("instance profile", lt.Ec2InstanceProfileArn)
		add("capacity", lt.CapacityOptionType)
		add("monitoring", lt.Monitoring)
		if n := lt.NetworkConfiguration; n != nil {
			add("subnets", strings.Join(n.Subnets, ", "))
			add("security groups", strings.Join(n.SecurityGroups, ", "))
		}
		if ir := lt.InstanceRequirements; ir != nil {
			if ir.VCpuCount != nil {
				add("vCPUs", span(ir.VCpuCount.Min, ir.VCpuCount.Max))
			}
			if ir.MemoryMiB != nil {
				add("memory (MiB)", span(ir.MemoryMiB.Min, ir.MemoryMiB.Max))
			}
			add("instance types", strings.Join(ir.AllowedInstanceTypes, ", "))
		}
	}
	return out
}

func span(lo, hi *int32) string {
	switch {
	case lo != nil && hi != nil:
		return fmt.Sprintf("%d to %d", *lo, *hi)
	case lo != nil:
		return fmt.Sprintf("at least %d", *lo)
	case hi != nil:
		return fmt.Sprintf("at most %d", *hi)
	}
	return ""
}
