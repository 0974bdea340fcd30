# Builds the single lesfarm binary into a small image. Used by docker-compose.yml.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/lesfarm ./cmd/lesfarm

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/lesfarm /usr/local/bin/lesfarm
ENTRYPOINT ["lesfarm"]
