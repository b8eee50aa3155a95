/* pcaudio_stub.c - a do-nothing libpcaudio.so.0 for running Debian's espeak-ng without ALSA/PulseAudio.
 *
 * espeak-ng links libpcaudio (audio playback), which pulls in libasound and libpulse. Training only writes WAV
 * files (`espeak-ng -w` / synchronous mode), which never opens an audio device, so every entry point here refuses.
 * Build: cc -shared -fPIC -O2 -Wl,-soname,libpcaudio.so.0 -o libpcaudio.so.0 pcaudio_stub.c */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

struct audio_object;

struct audio_object *create_audio_device_object(const char *device, const char *app, const char *desc) {
    (void)device, (void)app, (void)desc;
    return NULL;
}
int audio_object_open(struct audio_object *o, int fmt, uint32_t rate, uint8_t channels) {
    (void)o, (void)fmt, (void)rate, (void)channels;
    return ENODEV;
}
void audio_object_close(struct audio_object *o) { (void)o; }
void audio_object_destroy(struct audio_object *o) { (void)o; }
int audio_object_write(struct audio_object *o, const void *data, size_t bytes) {
    (void)o, (void)data, (void)bytes;
    return ENODEV;
}
int audio_object_drain(struct audio_object *o) { (void)o; return 0; }
int audio_object_flush(struct audio_object *o) { (void)o; return 0; }
const char *audio_object_strerror(struct audio_object *o, int error) {
    (void)o, (void)error;
    return "no audio device (libpcaudio stub)";
}
