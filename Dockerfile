# syntax=docker/dockerfile:1
# Multi-stage build of a static evictiond on a minimal base. `make image` builds the
# same image without a Docker engine (hack/build-image), as a docker-archive tarball.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/evictiond ./cmd/evictiond

FROM scratch
COPY --from=build /out/evictiond /evictiond
ENTRYPOINT ["/evictiond"]
CMD ["run"]
