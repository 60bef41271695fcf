module github.com/capstanhq/capstan

go 1.26.8
