package control

import "github.com/capstanhq/capstan/internal/api"

func (s *Service) registerTaskDefinitions(h *api.Handler) {}
