// The header must compile cleanly as C++17.
#include "dsh.h"
int main() {
    DshStatus s = DSH_OK;
    return s == DSH_OK && dsh_version() != nullptr ? 0 : 1;
}
