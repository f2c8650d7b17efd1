"""Where the objects are, set by looking at each image on a 50-pixel grid (not from any model's output)."""

PHOTO_OBJECTS = {
    # the astronaut's body from her hair to the bottom edge; the helmet on the right is not part of her
    "astronaut": ("person", (25, 15, 365, 512)),
    "chelsea": ("cat", (0, 0, 400, 300)),
    # the cup with its handle, not the saucer
    "coffee": ("cup", (172, 18, 410, 300)),
}

# vtest.avi, 768x576: the three walkers of frame 0 and the five large people of frame 100.
VTEST_PEOPLE = {
    0: [(252, 218, 284, 307), (500, 155, 530, 233), (640, 238, 686, 322)],
    100: [(348, 200, 382, 275), (374, 178, 408, 255), (495, 148, 522, 220), (515, 150, 542, 220), (590, 152, 618, 233)],
}
