module github.com/headroomhq/headroom/pairs/guard

go 1.26.8
