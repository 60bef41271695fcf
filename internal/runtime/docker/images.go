package docker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/image"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

// Pull fetches image, with auth if not nil, and returns once the engine
// has it. Failures reported inside the progress stream (the usual place
// for registry errors) are returned with the registry's message.
func (r *Runtime) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	var opts client.ImagePullOptions
	if auth != nil {
		enc, err := authconfig.Encode(registry.AuthConfig{
			Username:      auth.Username,
			Password:      auth.Password,
			ServerAddress: auth.ServerAddress,
		})
		if err != nil {
			return fmt.Errorf("pull %s: encode auth: %w", ref, err)
		}
		opts.RegistryAuth = enc
	}
	res, err := r.c.ImagePull(ctx, ref, opts)
	if err != nil {
		return wrap(err, "pull %s", ref)
	}
	defer res.Close()
	for m, err := range res.JSONMessages(ctx) {
		if err != nil {
			return wrap(err, "pull %s", ref)
		}
		if m.Error != nil {
			err := errors.New(m.Error.Message)
			if m.Error.Code == http.StatusNotFound {
				err = fmt.Errorf("%w: %w", runtime.ErrNotFound, err)
			}
			return fmt.Errorf("pull %s: %w", ref, err)
		}
	}
	return nil
}

// Image inspects a local image by reference or ID.
func (r *Runtime) Image(ctx context.Context, ref string) (runtime.Image, error) {
	res, err := r.c.ImageInspect(ctx, ref)
	if err != nil {
		return runtime.Image{}, wrap(err, "inspect image %s", ref)
	}
	return fromImageInspect(res.InspectResponse), nil
}

// Images lists local images, intermediate layers excluded.
func (r *Runtime) Images(ctx context.Context) ([]runtime.Image, error) {
	res, err := r.c.ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		return nil, wrap(err, "list images")
	}
	out := make([]runtime.Image, 0, len(res.Items))
	for _, s := range res.Items {
		out = append(out, fromImageSummary(s))
	}
	return out, nil
}

// RemoveImage deletes a local image by ID with all its tags. It fails,
// leaving the image intact, if any container (even stopped) uses it.
func (r *Runtime) RemoveImage(ctx context.Context, id string) error {
	img, err := r.c.ImageInspect(ctx, id)
	if err != nil {
		return wrap(err, "remove image %s", id)
	}
	// The engine refuses to delete by ID an image with several tags
	// unless forced, and forcing also skips its in-use check for stopped
	// containers; so check that ourselves and force only then.
	force := len(img.RepoTags) > 1
	if force {
		f := client.Filters{}
		f.Add("ancestor", img.ID)
		cs, err := r.c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f, Limit: 1})
		if err != nil {
			return wrap(err, "remove image %s", id)
		}
		if len(cs.Items) > 0 {
			return fmt.Errorf("remove image %s: in use by container %s", id, cs.Items[0].ID)
		}
	}
	_, err = r.c.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{Force: force, PruneChildren: true})
	return wrap(err, "remove image %s", id)
}

func fromImageInspect(in image.InspectResponse) runtime.Image {
	return runtime.Image{
		ID:          in.ID,
		RepoTags:    in.RepoTags,
		RepoDigests: in.RepoDigests,
		Size:        in.Size,
		Created:     parseTime(in.Created),
	}
}

func fromImageSummary(s image.Summary) runtime.Image {
	img := runtime.Image{
		ID:          s.ID,
		RepoTags:    dropNone(s.RepoTags),
		RepoDigests: dropNone(s.RepoDigests),
		Size:        s.Size,
	}
	if s.Created > 0 {
		img.Created = time.Unix(s.Created, 0)
	}
	return img
}

// dropNone removes the placeholders older engines list for untagged images.
func dropNone(refs []string) []string {
	return slices.DeleteFunc(slices.Clone(refs), func(s string) bool {
		return s == "<none>:<none>" || s == "<none>@<none>"
	})
}
