package store

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"

	"go.etcd.io/etcd/server/v3/embed"
)

// ParseAdvertiseURLs checks a comma-separated list of the URLs a member
// advertises: https://IP:PORT each (its certificate names IPs, not host
// names), and never an unspecified IP, which reaches nobody.
func ParseAdvertiseURLs(list string) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("each URL must be https://IP:PORT (got %q)", raw)
		}
		if err := CheckMemberAddr(u.Host); err != nil {
			return nil, fmt.Errorf("%s: %w", raw, err)
		}
		host, _, _ := net.SplitHostPort(u.Host)
		if ip := netip.MustParseAddr(host); ip.IsUnspecified() {
			return nil, fmt.Errorf("%s: cannot advertise %s, the IP of no host: advertise the IP others reach the member on", raw, ip)
		}
		out = append(out, "https://"+u.Host)
	}
	return out, nil
}

// checkAdvertised says what is wrong with a member's advertised URLs.
func checkAdvertised(cfg MemberConfig) error {
	if len(cfg.AdvertiseClientURLs)+len(cfg.AdvertisePeerURLs) > 0 && cfg.Listen == "" {
		return errors.New("store: advertised URLs need the member's client and peer addresses")
	}
	for what, list := range map[string][]string{"client": cfg.AdvertiseClientURLs, "peer": cfg.AdvertisePeerURLs} {
		if len(list) == 0 {
			continue
		}
		if _, err := ParseAdvertiseURLs(strings.Join(list, ",")); err != nil {
			return fmt.Errorf("store: the member's advertised %s URLs: %w", what, err)
		}
	}
	return nil
}

// advertisedHosts are the IP:PORTs of the advertised URLs, which the
// member's certificate must name.
func advertisedHosts(o memberOpts) []string {
	var out []string
	for _, raw := range append(append([]string(nil), o.advertiseClient...), o.advertisePeer...) {
		if u, err := url.Parse(raw); err == nil {
			out = append(out, u.Host)
		}
	}
	return out
}

// setAdvertised puts the advertised URLs in etcd's configuration.
func setAdvertised(cfg *embed.Config, o memberOpts) error {
	for _, x := range []struct {
		list []string
		dst  *[]url.URL
	}{{o.advertiseClient, &cfg.AdvertiseClientUrls}, {o.advertisePeer, &cfg.AdvertisePeerUrls}} {
		if len(x.list) == 0 {
			continue
		}
		var us []url.URL
		for _, raw := range x.list {
			u, err := url.Parse(raw)
			if err != nil {
				return fmt.Errorf("store: advertised URL %q: %w", raw, err)
			}
			us = append(us, url.URL{Scheme: u.Scheme, Host: u.Host})
		}
		*x.dst = us
	}
	return nil
}
